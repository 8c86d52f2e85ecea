"""Compactness (issue 15 item 2): a group's elastic pods stay in its domain when one holds them."""
from __future__ import annotations

from oracle import check_plan
from planner_cases import free_matrix, grid_topology, leaf, plan_input, request

from topology.groups import Group
from topology.planner import plan_gang


def test_subgroups_preferring_a_rack_with_minimum_1_of_2_each_keep_one_rack():
    """Two racks hold two 8-GPU pods each, each on one node. The gang's two mandatory pods fit on one
    node; confining the gang there left both subgroups' elastic pods in the other rack."""
    topology = grid_topology((1, 1, 3, 3))
    free = free_matrix([0, 0, 0, 0, 0, 16, 0, 0, 16])
    subgroups = [leaf(f"sub-{i}", "w", range(2 * i, 2 * i + 2), min_member=1, preferred_level="rack")
                 for i in range(2)]
    inp = plan_input(Group("job", children=subgroups), topology, free, {"w": request(gpu=8, cpu=8000)})
    plan = plan_gang(inp)
    assert check_plan(inp, plan) == [] and len(plan.slots) == 4
    for i in range(2):
        racks = {topology.node_domain[2][node] for slot, node in plan.slots.items() if slot.index // 2 == i}
        assert len(racks) == 1, plan.slots


def test_a_small_gang_preferring_a_rack_fills_a_busy_rack_before_breaking_a_whole_free_node():
    """Four 2-GPU pods preferring a rack. Rack 0 is free (two whole 8-GPU nodes); rack 1 has 4 GPUs left
    on each node. Climbing from single nodes, the tightest fit was a whole free node of rack 0, which a
    later 8-GPU pod needs whole; from the preferred level, the tightest rack is rack 1 and its leftovers
    hold the gang (Kueue's BestFit does the same), so rack 0 stays whole."""
    topology = grid_topology((1, 1, 2, 2))
    free = free_matrix([8, 8, 4, 4])
    inp = plan_input(leaf("job", "w", range(4), preferred_level="rack"), topology, free, {"w": request(gpu=2)})
    plan = plan_gang(inp)
    assert check_plan(inp, plan) == [] and len(plan.slots) == 4
    assert sorted(plan.slots.values()) == [2, 2, 3, 3]
