"""Segments placed together (issue 15 item 2): a segmented group uses no more domains at any level than
the best placement of the same pods in whole segments."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from oracle import check_plan
from planner_cases import free_matrix, grid_topology, plan_input, request, segmented

from topology.planner import plan_gang
from topology.planner.segments import best_fit
from topology.tree import Level, TopologyTree

ONE_GPU = {"w": request(gpu=1, cpu=100)}


def used(topology, plan, level: int) -> int:
    return len({topology.node_domain[level][node] for node in plan.slots.values()})


def whole_segment_optimum(topology, free, size: int, count: int, level: int) -> tuple[int, ...]:
    """Domains used at levels 0..level by the best choice of segment-level domains (coarsest level
    first), each holding free // size segments per node summed over the domain, by exhaustive search."""
    units = sorted({topology.node_domain[level][n] for n in range(len(free))})
    room = {u: sum(int(free[n]) for n in range(len(free)) if topology.node_domain[level][n] == u) // size
            for u in units}                                    # one GPU a pod: free GPUs are pods
    anchor = {u: next(n for n in range(len(free)) if topology.node_domain[level][n] == u) for u in units}
    best = None
    for k in range(1, len(units) + 1):
        for chosen in itertools.combinations(units, k):
            if sum(room[u] for u in chosen) < count:
                continue
            counts = tuple(len({topology.node_domain[l][anchor[u]] for u in chosen}) for l in range(level + 1))
            best = counts if best is None or counts < best else best
    return best


def test_segments_take_the_host_with_most_segments_first():
    """Rack 0: three hosts with room for one 2-pod segment and one for three; rack 1: hosts for 1, 2, 2.
    Four segments required on one host each: one after the other, each in the tightest host near the
    last, they took three hosts of rack 1; all together they take two hosts."""
    topology = grid_topology((1, 1, 2, 4))
    inp = plan_input(segmented("w", 8, 2, "host"), topology, free_matrix([2, 2, 2, 6, 2, 4, 4, 0]), ONE_GPU)
    plan = plan_gang(inp)
    assert check_plan(inp, plan) == [] and plan.placed
    assert used(topology, plan, 3) == 2


def domains_per_level(shape: tuple, free: list[int], segments: int, size: int) -> list[int]:
    """Domains used at each level by a group of `segments` segments of `size` pods, one a host."""
    topology = grid_topology(shape)
    inp = plan_input(segmented("w", segments * size, size, "host"), topology, free_matrix(free), ONE_GPU)
    plan = plan_gang(inp)
    assert check_plan(inp, plan) == [] and plan.placed
    return [used(topology, plan, level) for level in range(len(shape))]


def test_the_split_between_racks_is_chosen_for_the_fewest_hosts():
    """Block 0 holds four 2-pod segments on one host each (hosts for 1 and 3), block 1 three (hosts for
    1 and 2); five are needed. Level by level, block 0 took all four and block 1's tightest rack the
    fifth: three hosts. Three and two take two hosts (found by hypothesis)."""
    assert domains_per_level((1, 2, 2, 3), [0, 2, 6, 0, 0, 0, 0, 0, 2, 0, 0, 4], 5, 2) == [1, 2, 2, 2]


def test_the_block_is_chosen_for_the_fewest_racks_its_segments_need():
    """Five 3-pod segments, one a host, fit in either block, each on four hosts; block 0 holds them in
    two racks, block 1 only in three. Ranked by hosts alone, the blocks tied and the tighter won."""
    assert domains_per_level((1, 2, 3, 2), [6, 4, 2, 1, 5, 5, 5, 3, 4, 0, 6, 0], 5, 3) == [1, 1, 2, 4]


def test_best_fit_takes_the_roomiest_then_the_tightest_for_the_remainder():
    assert best_fit(np.array([1, 3, 2, 1]), 4) == [(1, 3), (0, 1)]
    assert best_fit(np.array([1, 3, 2, 1]), 5) == [(1, 3), (2, 2)]
    assert best_fit(np.array([1, 1]), 3) is None


@st.composite
def instances(draw):
    shape = (1, draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    nodes = int(np.prod(shape))
    assume(nodes <= 12)                    # the brute force tries every set of segment-level domains
    free = draw(st.lists(st.integers(0, 6), min_size=nodes, max_size=nodes))
    size = draw(st.integers(1, 3))
    count = draw(st.integers(1, 5))
    level = draw(st.sampled_from(["rack", "host"]))
    strategy = draw(st.sampled_from(["binpack", "spread"]))
    return shape, free, size, count, level, strategy


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_segmented_group_never_uses_more_domains_than_whole_segments_need(case):
    shape, free, size, count, level_name, strategy = case
    topology = grid_topology(shape)
    level = 2 if level_name == "rack" else 3
    inp = plan_input(segmented("w", size * count, size, level_name), topology, free_matrix(free), ONE_GPU,
                     strategy=strategy)
    plan = plan_gang(inp)
    optimum = whole_segment_optimum(topology, free, size, count, level)
    assert (optimum is not None) == plan.placed
    if plan.placed:
        assert check_plan(inp, plan) == []
        got = tuple(used(topology, plan, l) for l in range(level + 1))
        assert all(g <= o for g, o in zip(got, optimum)), (got, optimum)


# --- Kueue's own BestFit cases for slices (pkg/cache/scheduler/tas_cache_test.go, TestFindTopologyAssignments):
# block required for the PodSet, slices of 2 pods required on one host, 1 CPU a pod; hosts' CPUs as given.
KUEUE_HOST_SLICES = [
    # (case name, cores of each host in one rack, pods, hosts Kueue uses)
    ("host required for slices", [3, 3, 3], 6, 3),
    ("prioritize more free slice capacity first and then tight fit", [6, 5, 4, 2], 12, 3),   # was 4
    ("select domains with tight fit", [3, 2, 2], 4, 2),
    ("optimize last domain", [4, 3, 2], 6, 2),                                               # was 3
]


@pytest.mark.parametrize("name, cores, pods, hosts", KUEUE_HOST_SLICES, ids=[case[0] for case in KUEUE_HOST_SLICES])
def test_kueue_bestfit_slice_cases_use_as_few_hosts_as_kueue(name, cores, pods, hosts):
    topology = grid_topology((1, 1, len(cores)), names=("block", "rack", "host"))
    free = free_matrix([0] * len(cores), [c * 1000 for c in cores])
    inp = plan_input(segmented("w", pods, 2, "host", required_level="block"), topology, free,
                     {"w": request(cpu=1000)})
    plan = plan_gang(inp)
    assert check_plan(inp, plan) == [] and plan.placed
    assert used(topology, plan, 2) == hosts


def test_kueue_bestfit_rack_slices_case():
    """b1: r1 (x1, x2), r2 (x3, x4, x5); b2: r1 (x6, x7); one CPU each; 4 pods in slices of 2 required
    on a rack, the block required: Kueue uses two racks of b1, four hosts."""
    topology = TopologyTree("t", "test", [Level("example.com/block", "block"), Level("example.com/rack", "rack"),
                                          Level("example.com/host", "host")],
                            [f"x{i}" for i in range(1, 8)],
                            [("b1", "b1-r1", "x1"), ("b1", "b1-r1", "x2"), ("b1", "b1-r2", "x3"),
                             ("b1", "b1-r2", "x4"), ("b1", "b1-r2", "x5"), ("b2", "b2-r1", "x6"),
                             ("b2", "b2-r1", "x7")])
    inp = plan_input(segmented("w", 4, 2, "rack", required_level="block"), topology,
                     free_matrix([0] * 7, [1000] * 7), {"w": request(cpu=1000)})
    plan = plan_gang(inp)
    assert check_plan(inp, plan) == [] and plan.placed
    assert (used(topology, plan, 0), used(topology, plan, 1), used(topology, plan, 2)) == (1, 2, 4)


def test_of_racks_with_equal_room_the_one_holding_it_in_fewer_hosts_goes_first():
    """Found by the property test below: five 2-pod segments, each on one host; rack 3 holds two
    segments on its one 4-GPU host, racks 1 and 2 two segments on two hosts each. Taking racks of equal
    room in tree order used 5 hosts; the best uses 4 (host 7 twice)."""
    topology = grid_topology((1, 2, 2, 2))
    inp = plan_input(segmented("w", 10, 2, "host"), topology, free_matrix([0, 2, 2, 2, 2, 2, 0, 4]), ONE_GPU)
    plan = plan_gang(inp)
    assert check_plan(inp, plan) == [] and plan.placed
    assert used(topology, plan, 3) == 4
