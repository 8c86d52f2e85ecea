"""Compactness of elastic pods (issue 15 item 2): subgroups that prefer (or require) a rack each, with
minimum 1 of 2, keep as many pods as possible inside the rack of their mandatory pod. Allotting the
minimums alone packed siblings into one rack, and their elastic pods spilled into the others."""
from __future__ import annotations

import itertools
import random

from oracle import check_plan
from planner_cases import free_matrix, grid_topology, leaf, plan_input, request

from topology.groups import Group
from topology.planner import plan_gang


def one_of_two_per_rack(racks: int, per_rack: int, free_gpus: list[int], subgroups: int,
                        level: str = "preferred_level"):
    """Subgroups of two 8-GPU pods, minimum 1, each asking for a rack, on racks of `per_rack` nodes."""
    topology = grid_topology((1, 1, racks, per_rack))
    children = [leaf(f"sub-{i}", "w", range(2 * i, 2 * i + 2), min_member=1, **{level: "rack"})
                for i in range(subgroups)]
    inp = plan_input(Group("job", children=children), topology, free_matrix(free_gpus),
                     {"w": request(gpu=8, cpu=8000)})
    return inp, plan_gang(inp)


def racks_of(plan, subgroup: int, per_rack: int) -> list[int]:
    return [node // per_rack for slot, node in plan.slots.items() if slot.index // 2 == subgroup]


def pods_in_own_rack(plan, subgroups: int, per_rack: int) -> int:
    """Pods in the rack of their subgroup's mandatory pod (either pod, when both are placed)."""
    total = 0
    for i in range(subgroups):
        racks = racks_of(plan, i, per_rack)
        total += 2 if len(racks) == 2 and racks[0] == racks[1] else min(1, len(racks))
    return total


def best_in_own_rack(room: list[int], subgroups: int) -> int | None:
    """Brute force over the racks of the mandatory pods: a rack holding n of them and room for r pods
    keeps min(r, 2n) pods in their own rack. None: the mandatory pods do not fit."""
    best = None
    for racks in itertools.product(range(len(room)), repeat=subgroups):
        mandatory = [racks.count(r) for r in range(len(room))]
        if all(n <= r for n, r in zip(mandatory, room)):
            kept = sum(min(r, 2 * n) for n, r in zip(mandatory, room))
            best = kept if best is None else max(best, kept)
    return best


def test_three_subgroups_on_racks_of_two_each_keep_their_rack():
    """Free GPUs [8, 8 | 8, 0 | 8, 8]: sub-0 and sub-2 take a rack of two each, sub-1 (one pod) the
    third; the minimums alone were packed into rack 0 and two subgroups split over two racks."""
    inp, plan = one_of_two_per_rack(3, 2, [8, 8, 8, 0, 8, 8], 3)
    assert check_plan(inp, plan) == [] and len(plan.slots) == 5
    assert all(len(set(racks_of(plan, i, 2))) == 1 for i in range(3)), plan.slots
    assert pods_in_own_rack(plan, 3, 2) == 5


def test_on_two_racks_of_three_only_one_subgroup_splits():
    """Free GPUs [0, 8, 16 | 8, 16, 0]: six pods fit, three per rack. Two subgroups whole in one rack
    each, the third split; before, all three minimums went into rack 0 and every subgroup split."""
    inp, plan = one_of_two_per_rack(2, 3, [0, 8, 16, 8, 16, 0], 3)
    assert check_plan(inp, plan) == [] and len(plan.slots) == 6
    whole = [i for i in range(3) if len(set(racks_of(plan, i, 3))) == 1]
    assert len(whole) == 2, plan.slots
    assert pods_in_own_rack(plan, 3, 3) == 5


def test_too_little_room_for_every_elastic_pod_does_not_confine_the_gang_to_one_rack():
    """Free GPUs [16, 8 | 8, 8]: five pods fit, three in rack 0, which also holds the three minimums.
    The gang placed in rack 0 kept only its minimums there; over both racks, two subgroups stay whole."""
    inp, plan = one_of_two_per_rack(2, 2, [16, 8, 8, 8], 3)
    assert check_plan(inp, plan) == [] and len(plan.slots) == 5
    assert pods_in_own_rack(plan, 3, 2) == 5


def test_elastic_pods_stay_in_their_subgroups_racks_as_far_as_possible():
    """Random tiny clusters (2-3 racks of 2-4 nodes with 0, 8 or 16 free GPUs) against the brute force:
    every mandatory pod placed when they fit, no broken rule, the most pods possible in their own rack,
    and (a preferred level) as many pods in total as fit."""
    rng = random.Random(15)
    checked = 0
    for _ in range(600):
        racks, per_rack, subgroups = rng.randint(2, 3), rng.randint(2, 4), rng.randint(2, 3)
        free_gpus = [rng.choice([0, 8, 8, 16]) for _ in range(racks * per_rack)]
        level = "required_level" if rng.random() < 0.25 else "preferred_level"
        inp, plan = one_of_two_per_rack(racks, per_rack, free_gpus, subgroups, level)
        assert check_plan(inp, plan) == [], free_gpus
        room = [sum(gpus // 8 for gpus in free_gpus[r * per_rack:(r + 1) * per_rack]) for r in range(racks)]
        best = best_in_own_rack(room, subgroups)
        assert plan.placed == (best is not None), (free_gpus, subgroups, plan.reason)
        if best is None:
            continue
        checked += 1
        assert pods_in_own_rack(plan, subgroups, per_rack) == best, (free_gpus, subgroups, level, plan.slots)
        if level == "preferred_level":
            assert len(plan.slots) == min(sum(room), 2 * subgroups), (free_gpus, subgroups, plan.slots)
    assert checked > 400
