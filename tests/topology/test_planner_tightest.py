"""When no single child holds a group's pods, binpack takes the fewest children that do and, of those
sets, the tightest: a free rack stays whole when partly used racks hold the pods in as many racks
(topology/planner/tightest.py)."""
from __future__ import annotations

import numpy as np
from oracle import check_plan
from planner_cases import free_matrix, grid_topology, leaf, plan_input, request

from topology.planner import plan_gang
from topology.planner.tightest import tightest_set

EIGHT_GPUS = {"w": request(gpu=8, cpu=100)}


def test_a_job_over_two_racks_keeps_the_free_rack_whole():
    """One block of three racks of four nodes: rack 0 is free, racks 1 and 2 have three free nodes each.
    Six pods of 8 GPUs need two racks; largest first took the free rack and three nodes of another
    (leaving 1 + 3 nodes in two racks), the tightest pair takes racks 1 and 2 and leaves rack 0 whole."""
    topology = grid_topology((1, 1, 3, 4))
    free = free_matrix([8, 8, 8, 8, 8, 8, 8, 0, 8, 8, 8, 0])
    inp = plan_input(leaf("job", "w", range(6), required_level="block"), topology, free, EIGHT_GPUS)
    plan = plan_gang(inp)
    assert check_plan(inp, plan) == [] and plan.placed
    racks = sorted({int(topology.node_domain[2][node]) for node in plan.slots.values()})
    assert racks == [1, 2]


def test_tightest_set_is_the_fewest_children_with_the_least_room():
    assert sorted(tightest_set(np.array([8, 7, 7]), 14, 2).tolist()) == [1, 2]
    assert sorted(tightest_set(np.array([8, 7, 5]), 13, 2).tolist()) == [0, 2]
    assert sorted(tightest_set(np.array([6, 8, 3, 2]), 9, 2).tolist()) == [0, 2]
    assert tightest_set(np.array([4, 4]), 8, 2).tolist() == [0, 1]
    assert tightest_set(np.array([0, 8, 8, 8, 8]), 16, 2).tolist() == [1, 2]     # alike: the first ones


def test_every_set_holds_the_pods_in_the_fewest_children():
    """Exact for few sets, greedy beyond MAX_SETS: always `size` children that hold `need`, and the exact
    search never has more room than the largest-first choice."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        room = rng.integers(1, 9, size=int(rng.integers(2, 24)))
        need = int(rng.integers(1, int(room.sum()) + 1))
        size = int(np.searchsorted(np.cumsum(np.sort(room)[::-1]), need)) + 1
        picks = tightest_set(room, need, size)
        assert len(set(picks.tolist())) == size and int(room[picks].sum()) >= need
        assert int(room[picks].sum()) <= int(np.sort(room)[::-1][:size].sum())
