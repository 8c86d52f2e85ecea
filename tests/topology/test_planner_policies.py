"""Placement policies (topology/planner/policies/): a policy registered in one place is used by the planner and
accepted wherever a strategy is named; every registered policy keeps the interface's contract."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle import check_plan
from planner_cases import free_matrix, grid_topology, leaf, plan_input, random_instance, request

from topology.cluster import Cluster
from topology.planner import build_plan_input, plan_gang, policy_named, policy_names, register
from topology.planner.policies import POLICIES

GPU8 = {"w": request(gpu=8, cpu=8000)}


class LastFit:
    """A toy third policy: the last domain in tree order first, and of a domain's children the last ones."""
    name = "lastfit"
    packs_elastic = False

    def order(self, fit) -> np.ndarray:
        return np.arange(len(fit.domains))[::-1]

    def split(self, room: np.ndarray, need: int) -> tuple[np.ndarray, np.ndarray]:
        picks, shares = [], []
        for child in range(len(room) - 1, -1, -1):
            take = min(int(room[child]), need)
            picks.append(child)
            shares.append(take)
            need -= take
            if not need:
                break
        return np.array(picks), np.array(shares, dtype=np.int64)

    def tightness(self, room):
        return room


@pytest.fixture
def lastfit():
    """LastFit registered for one test (the one line a new policy adds), unregistered after."""
    policy = register(LastFit())
    yield policy
    POLICIES.pop(policy.name)


def test_a_registered_policy_is_used_by_the_planner(lastfit):
    topology = grid_topology((1, 1, 3, 4))
    busy = [4 * rack + host for rack, host in ((0, 0), (1, 0), (1, 1))]      # racks with room 3, 2, 4
    free = free_matrix([0 if n in busy else 8 for n in range(12)])
    placed = {}
    for strategy in ("binpack", "spread", "lastfit"):
        plan = plan_gang(plan_input(leaf("job", "w", range(2), required_level="rack"), topology, free, GPU8,
                                    strategy=strategy))
        assert plan.placed and plan.details["strategy"] == strategy
        placed[strategy] = sorted(plan.slots.values())
    assert placed["binpack"] == [6, 7]              # hosts 2 and 3 of the tightest rack
    assert placed["spread"] == [8, 9]               # the emptiest rack, its first hosts of equal room
    assert placed["lastfit"] == [10, 11]            # the last rack, its last hosts
    assert "lastfit" in policy_names() and policy_named("lastfit") is lastfit


def test_a_gangs_own_policy_wins_over_the_default(lastfit):
    topology = grid_topology((1, 1, 2, 2))
    inp = plan_input(leaf("job", "w", range(1)), topology, free_matrix([8] * 4), GPU8)
    inp.tree.strategy = "lastfit"
    plan = plan_gang(inp)
    assert list(plan.slots.values()) == [3]                     # the last host of the last rack
    assert plan.details["strategy"] == "lastfit"


def test_an_unknown_policy_is_refused_naming_every_registered_one(lastfit):
    topology = grid_topology((1, 1, 1, 2))
    inp = plan_input(leaf("job", "w", [0]), topology, free_matrix([8, 8]), GPU8, strategy="firstfit")
    assert plan_gang(inp).reason == "strategy 'firstfit' is not valid; valid strategies: binpack, spread, lastfit"
    with pytest.raises(ValueError, match="valid strategies: binpack, spread, lastfit$"):
        build_plan_input(Cluster([], {}), inp.tree, strategy="firstfit")


def test_registering_something_that_is_not_a_policy_names_what_it_lacks():
    class Unsorted:
        name = "unsorted"

        def order(self, fit):
            return np.arange(len(fit.domains))

    with pytest.raises(TypeError, match="Unsorted is not a PlacementPolicy: it lacks packs_elastic, split, tightness"):
        register(Unsorted())
    assert "unsorted" not in policy_names()


@given(room=st.lists(st.integers(1, 20), min_size=1, max_size=12), share=st.floats(0.01, 1.0))
def test_every_builtin_policy_splits_exactly_the_pods_asked_for(room, share):
    """split's contract (PlacementPolicy): distinct children, none given more than its room, `need` in all,
    and one child when one holds every pod (the fewest domains at every level)."""
    room = np.array(room, dtype=np.int64)
    need = max(1, int(share * room.sum()))
    for name in ("binpack", "spread"):
        picks, shares = policy_named(name).split(room, need)
        assert len(set(picks.tolist())) == len(picks) == len(shares)
        assert (shares > 0).all() and (shares <= room[picks]).all() and shares.sum() == need
        if room.max() >= need:
            assert len(picks) == 1


@pytest.mark.parametrize("seed", range(60))
def test_any_policy_gives_a_valid_plan(seed, lastfit):
    """Which domains fit is decided before any policy orders them (candidates.fitting): a plan under any
    registered policy, the toy one included, keeps every rule (capacity, usable nodes, required levels,
    minimums, segments; the brute force's checker), and names its policy."""
    inp = random_instance(seed)
    for name in policy_names():
        plan = plan_gang(dataclasses.replace(inp, strategy=name))
        assert check_plan(inp, plan) == [], name
        assert not plan.placed or plan.details["strategy"] == name
