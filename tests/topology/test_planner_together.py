"""A group is ranked by the new domains it adds to its gang (every placed sibling counts, not only the
last one), then by the tightest fit (topology/planner/together.py)."""
from __future__ import annotations

import numpy as np
from oracle import check_plan
from planner_cases import free_matrix, grid_topology, plan_input, request, segmented

from topology.planner import plan_gang
from topology.planner.layout import Layout
from topology.planner.together import shared_levels

ONE_GPU = {"w": request(gpu=1, cpu=100)}


def blocks_used(topology, plan) -> int:
    return len({int(topology.node_domain[1][node]) for node in plan.slots.values()})


def test_short_segment_joins_a_block_the_gang_uses_not_a_new_one_near_the_last_segment():
    """Two zones of two blocks of two racks (one node each). Three segments of 4 go to z0/b0, z0/b1 and,
    last, z1/b0; the short one (3 pods) fits z0/b0's second rack or z1/b1's. Next to the last segment
    (same zone) it opened a fourth block; in a block the gang already uses it needs three."""
    topology = grid_topology((2, 2, 2, 1))
    inp = plan_input(segmented("w", 15, 4, "rack"), topology, free_matrix([4, 3, 4, 0, 4, 0, 0, 3]), ONE_GPU)
    plan = plan_gang(inp)
    assert check_plan(inp, plan) == [] and plan.placed
    assert blocks_used(topology, plan) == 3
    assert plan.groups["w-seg-3"].domain == "n00001"        # z0-b0-r1 (it went to z1-b1-r1)


def test_short_segment_takes_the_tightest_rack_among_the_gangs_blocks():
    """Two blocks of three racks: three segments of 4 take both 4-racks of block 0 and, last, block 1's.
    The short segment (2 pods) fits block 0's 2-rack exactly or block 1's 3-rack; both blocks are the
    gang's already. Next to the last segment it left one GPU stranded in block 1; now it fits exactly."""
    topology = grid_topology((1, 2, 3, 1))
    inp = plan_input(segmented("w", 14, 4, "rack"), topology, free_matrix([4, 4, 2, 4, 0, 3]), ONE_GPU)
    plan = plan_gang(inp)
    assert check_plan(inp, plan) == [] and plan.placed
    assert plan.groups["w-seg-3"].domain == "n00002"        # z0-b0-r2 (it went to z0-b1-r2)
    assert blocks_used(topology, plan) == 2


def test_shared_levels_counts_the_levels_down_to_the_finest_used_ancestor():
    topology = grid_topology((2, 2, 2, 1))
    layout = Layout(topology, len(topology.node_names))
    racks = np.arange(8)                      # rack r of block b of zone z is 4z + 2b + r
    shared = shared_levels(layout, 2, racks, np.array([0, 4]))
    assert shared.tolist() == [3, 2, 1, 1, 3, 2, 1, 1]
    assert shared_levels(layout, 2, racks, np.empty(0, dtype=np.int64)).tolist() == [0] * 8
