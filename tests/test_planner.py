"""Example tests for each planner semantic (hand-built topologies and group trees)."""
from __future__ import annotations

import numpy as np
import pytest
from oracle import check_plan
from planner_cases import (
    free_matrix,
    grid_topology,
    leaf,
    plan_input,
    request,
    segmented,
)

from topology.groups import Group, SegmentInfo, Slot
from topology.planner import common_level, evaluate_domain, plan_gang, replan_slots
from topology.planner.layout import layout_for

GPU8 = {"w": request(gpu=8, cpu=8000)}


def gpus(topology, per_node=8, busy=()):
    """8 GPUs on every node, `busy` nodes full."""
    values = [per_node] * len(topology.node_names)
    for node in busy:
        values[node] = 0
    return free_matrix(values)


def node(z, b, r, h, shape=(1, 2, 2, 4)):
    return ((z * shape[1] + b) * shape[2] + r) * shape[3] + h


def domain_of(topology, level, node_index):
    return topology.domain_ids[level][topology.node_domain[level][node_index]]


def place(root, topology, free, requests=GPU8, **kwargs):
    inp = plan_input(root, topology, free, requests, **kwargs)
    plan = plan_gang(inp)
    assert check_plan(inp, plan) == []
    return inp, plan


# --- levels ----------------------------------------------------------------------------------------------

def test_ranking_order_rack_then_segments_in_racks_then_block():
    """The issue's order: all in one rack; segments in racks and the job in one block; all in one block."""
    topology = grid_topology((1, 2, 2, 8))            # racks of 8 nodes, blocks of 2 racks
    shape = (1, 2, 2, 8)
    job = lambda: segmented("w", 8, 4, segment_preferred="rack", preferred_level="block")
    # 1. a whole free rack: everything in it
    _, in_rack = place(job(), topology, gpus(topology))
    # 2. no rack holds 8, but two racks of one block hold 4 each
    busy = [node(0, b, r, h, shape) for b in range(2) for r in range(2) for h in range(4)]
    _, in_block = place(job(), topology, gpus(topology, busy=busy))
    # 3. every rack holds only 3: the segments must span racks, the job still in one block
    busy = [node(0, 0, 0, h, shape) for h in range(3)] + [node(0, 0, 1, h, shape) for h in range(5)]
    busy += [node(0, 1, r, h, shape) for r in range(2) for h in range(8)]   # racks of block 0 hold 5 and 3
    _, spanning = place(job(), topology, gpus(topology, busy=busy))
    for plan in (in_rack, in_block, spanning):
        assert plan.placed and len(plan.slots) == 8
    assert in_rack.groups["job"].level == "rack"
    assert in_block.groups["job"].level == "block"
    assert [in_block.groups[f"w-seg-{s}"].level for s in range(2)] == ["rack", "rack"]
    assert spanning.groups["job"].level == "block"
    assert {spanning.groups[f"w-seg-{s}"].level for s in range(2)} == {"rack", "block"}
    assert in_rack.rank < in_block.rank < spanning.rank


def test_required_level_is_hard():
    topology = grid_topology((1, 2, 2, 4))
    busy = [node(0, b, 0, h) for b in range(2) for h in range(4)] + [node(0, b, 1, 0) for b in range(2)]
    free = gpus(topology, busy=busy)                  # 3 free nodes per block, 6 in the cluster
    _, refused = place(leaf("job", "w", range(4), required_level="block"), topology, free)
    assert not refused.placed
    assert refused.reason.startswith("block z0-b0 fits 3 of 4 pods (8 nvidia.com/gpu each)")


def test_preferred_level_climbs_and_finally_splits():
    topology = grid_topology((1, 2, 2, 4))
    busy = [node(0, b, 0, h) for b in range(2) for h in range(4)] + [node(0, b, 1, 0) for b in range(2)]
    free = gpus(topology, busy=busy)
    _, split = place(leaf("job", "w", range(4), preferred_level="block"), topology, free)
    assert split.placed and split.groups["job"].spans["block"] == 2
    _, climbed = place(leaf("job", "w", range(3), preferred_level="host"), topology, free)
    assert climbed.groups["job"].level == "rack"      # no host holds 3 pods of 8 GPUs; one rack does


def test_preferred_never_climbs_above_required():
    topology = grid_topology((1, 2, 2, 4))
    busy = [node(0, 0, r, h) for r in range(2) for h in range(3)]   # block 0 keeps 2 free nodes
    free = gpus(topology, busy=busy)
    root = leaf("job", "w", range(3), required_level="rack", preferred_level="host")
    _, plan = place(root, topology, free)
    assert plan.placed and plan.groups["job"].level == "rack"
    assert domain_of(topology, 1, plan.slots[Slot("w", 0)]) == "z0/z0-b1"


def test_children_stay_inside_the_parent_domain():
    topology = grid_topology((1, 2, 2, 4))
    root = segmented("w", 8, 4, segment_level="rack", required_level="block")
    _, plan = place(root, topology, gpus(topology, busy=[node(0, 0, 0, 0)]))
    assert plan.placed
    blocks = {domain_of(topology, 1, n) for n in plan.slots.values()}
    assert blocks == {"z0/z0-b1"}                      # block 0 lost a node, so only block 1 holds both


def test_unknown_level_is_a_refusal_listing_valid_levels():
    topology = grid_topology((1, 2, 2, 4))
    _, plan = place(leaf("job", "w", range(2), required_level="pod-rack"), topology, gpus(topology))
    assert not plan.placed
    assert "unknown level 'pod-rack'" in plan.reason and "rack" in plan.reason


# --- gang minimums and elastic pods ------------------------------------------------------------------------

def test_gang_is_all_or_nothing():
    topology = grid_topology((1, 1, 1, 4))
    _, plan = place(leaf("job", "w", range(5)), topology, gpus(topology))
    assert not plan.placed and plan.slots == {}
    assert plan.reason.startswith("the cluster fits 4 of 5 pods")


def test_min_subgroup_places_at_least_k_and_more_when_they_fit():
    topology = grid_topology((1, 1, 2, 4))
    children = [leaf(f"replica-{i}", "w", range(2 * i, 2 * i + 2), required_level="rack") for i in range(5)]
    _, some = place(Group("job", children=children, min_subgroup=2), topology,
                    gpus(topology, busy=[node(0, 0, 0, h, (1, 1, 2, 4)) for h in range(4)]))
    assert some.placed
    whole = [g for g in some.groups if g.startswith("replica") and some.groups[g].pods == 2]
    assert len(whole) == 2 and len(some.unplaced) == 6
    children = [leaf(f"replica-{i}", "w", range(2 * i, 2 * i + 2), required_level="rack") for i in range(5)]
    _, more = place(Group("job", children=children, min_subgroup=2), topology, gpus(topology))
    assert more.placed and len(more.slots) == 8      # four replicas fit, the fifth is left out whole
    assert all(more.groups[f"replica-{i}"].pods in (0, 2) for i in range(5))


def test_leaf_min_member_and_elastic_pods_stay_in_the_required_domain():
    topology = grid_topology((1, 2, 1, 4))
    root = leaf("job", "w", range(6), min_member=3, required_level="block")
    _, plan = place(root, topology, gpus(topology))
    assert plan.placed and len(plan.slots) == 4        # one block of 4 nodes, never a second block
    assert plan.unplaced == [Slot("w", 4), Slot("w", 5)]
    assert "2 elastic pods" in plan.reason


def test_inner_min_member_counts_pods_of_the_subtree():
    topology = grid_topology((1, 1, 1, 3))
    children = [leaf("a", "w", range(2), min_member=0), leaf("b", "w", range(2, 4), min_member=1)]
    _, plan = place(Group("job", children=children, min_member=3), topology, gpus(topology))
    assert plan.placed and len(plan.slots) == 3
    _, refused = place(Group("job", children=[leaf("a", "w", range(2), min_member=0),
                                              leaf("b", "w", range(2, 4), min_member=1)], min_member=4),
                       topology, gpus(topology))
    assert not refused.placed


def test_binpack_mandatory_pods_leave_room_for_the_elastic_ones():
    # rack 0 holds 4 pods (the tightest fit for the 4 mandatory ones), rack 1 holds all 8
    shape = (1, 1, 2, 8)
    topology = grid_topology(shape)
    free = gpus(topology, busy=[node(0, 0, 0, h, shape) for h in range(4)])
    _, plan = place(leaf("job", "w", range(8), min_member=4, required_level="rack"), topology, free)
    assert plan.placed and len(plan.slots) == 8 and not plan.unplaced
    assert plan.groups["job"].domain == "z0/z0-b0/z0-b0-r1"


# --- strategies, exclusivity, rank order ------------------------------------------------------------------------

def test_binpack_takes_the_tightest_rack_and_spread_the_emptiest():
    topology = grid_topology((1, 1, 3, 4))
    shape = (1, 1, 3, 4)
    busy = [node(0, 0, 0, 0, shape), node(0, 0, 0, 1, shape), node(0, 0, 1, 0, shape)]
    free = gpus(topology, busy=busy)                  # racks hold 2, 3 and 4 pods
    _, binpack = place(leaf("job", "w", range(2), required_level="rack"), topology, free)
    inp = plan_input(leaf("job", "w", range(2), required_level="rack"), topology, free, GPU8, strategy="spread")
    spread = plan_gang(inp)
    assert binpack.groups["job"].domain == "z0/z0-b0/z0-b0-r0"
    assert common_level(layout_for(topology, len(free)), np.array(list(spread.slots.values())))[0] >= 2
    assert domain_of(topology, 2, spread.slots[Slot("w", 0)]) == "z0/z0-b0/z0-b0-r2"


def test_equal_fits_go_inside_the_fullest_rack_and_block():
    # every free node (and every whole rack) fits the job exactly: the tie goes to the tightest parent,
    # so partly used racks and blocks fill up and empty ones stay whole for big jobs
    shape = (1, 2, 2, 2)
    topology = grid_topology(shape)
    free = gpus(topology, busy=[node(0, 1, 1, 0, shape)])      # block b1 holds 3 pods, its rack r1 one
    _, single = place(leaf("job", "w", [0]), topology, free)
    assert single.slots[Slot("w", 0)] == node(0, 1, 1, 1, shape)
    _, pair = place(leaf("job", "w", range(2), required_level="rack"), topology, free)
    assert pair.groups["job"].domain == "z0/z0-b1/z0-b1-r0"
    inp = plan_input(leaf("job", "w", range(2), required_level="rack"), topology, free, GPU8, strategy="spread")
    assert domain_of(topology, 1, plan_gang(inp).slots[Slot("w", 0)]) == "z0/z0-b0"


def test_pods_split_over_blocks_use_the_fewest_racks():
    # no block holds the 5 pods: block b0 takes 4 (racks of 2 + 2), b1 the rest; the racks are then
    # chosen over both blocks together (3 + 2 pods: 2 racks), not block by block (2 + 2 + 1: 3 racks)
    shape = (1, 2, 2, 3)
    topology = grid_topology(shape)
    busy = [node(0, 0, 0, 2, shape), node(0, 0, 1, 2, shape), node(0, 1, 1, 1, shape), node(0, 1, 1, 2, shape)]
    _, plan = place(leaf("job", "w", range(5), preferred_level="block"), topology, gpus(topology, busy=busy))
    assert plan.groups["job"].spans == {"zone": 1, "block": 2, "rack": 2, "host": 5}


def test_workload_strategy_overrides_the_service_setting():
    topology = grid_topology((1, 1, 3, 4))
    shape = (1, 1, 3, 4)
    free = gpus(topology, busy=[node(0, 0, 0, 0, shape), node(0, 0, 0, 1, shape)])
    inp = plan_input(leaf("job", "w", range(2), required_level="rack"), topology, free, GPU8)
    inp.tree.strategy = "spread"
    plan = plan_gang(inp)
    assert domain_of(topology, 2, plan.slots[Slot("w", 0)]) != "z0/z0-b0/z0-b0-r0"
    inp.tree.strategy = "tightest"
    assert "valid strategies: binpack, spread" in plan_gang(inp).reason


def test_exclusive_group_avoids_domains_of_other_gangs_and_of_its_siblings():
    topology = grid_topology((1, 1, 3, 4))
    occupied = [np.array([True]), np.array([True]), np.array([True, False, False])]
    children = [leaf(f"w-seg-{i}", "w", range(2 * i, 2 * i + 2), required_level="rack", exclusive=True,
                     segment=SegmentInfo("w", i, 2, 2)) for i in range(2)]
    _, plan = place(Group("job", children=children), topology, gpus(topology), occupied=occupied)
    racks = [plan.groups[f"w-seg-{i}"].domain for i in range(2)]
    assert plan.placed and racks == ["z0/z0-b0/z0-b0-r1", "z0/z0-b0/z0-b0-r2"]
    occupied[2][1] = True
    _, refused = place(Group("job", children=[leaf(f"w-seg-{i}", "w", range(2 * i, 2 * i + 2),
                                                   required_level="rack", exclusive=True) for i in range(2)]),
                       topology, gpus(topology), occupied=occupied)
    assert not refused.placed


def test_rank_order_consecutive_indexes_and_sibling_segments():
    topology = grid_topology((1, 2, 2, 4))
    free = gpus(topology)
    root = segmented("w", 16, 4, segment_level="rack")
    _, plan = place(root, topology, free, requests={"w": request(gpu=4)})
    nodes = [plan.slots[Slot("w", i)] for i in range(16)]
    assert nodes == sorted(nodes)                     # indexes follow the node (tree) order
    assert all(nodes[2 * i] == nodes[2 * i + 1] for i in range(8))   # two 4-GPU pods per node
    racks = [plan.groups[f"w-seg-{s}"].domain for s in range(4)]
    assert racks[0].rsplit("/", 1)[0] == racks[1].rsplit("/", 1)[0]  # segments 0 and 1 share a block


def test_a_sibling_confined_to_one_domain_is_tried_before_a_free_one():
    # found by the oracle: the free group, placed first in tree order, takes 3 of the 4 nodes of the
    # only host that holds 3 pods, so the group required on one host fails; placing the confined
    # group first leaves the free one room elsewhere
    topology = grid_topology((2,), names=("host",), nodes_per_leaf=4)
    free = free_matrix([2, 2, 2, 2, 4, 0, 0, 0])             # pods of 2 GPUs: host h0 holds 4, h1 2
    root = Group("job", children=[leaf("free", "w", range(3)),
                                  leaf("confined", "w", range(3, 6), required_level="host")])
    _, plan = place(root, topology, free, {"w": request(gpu=2)})
    assert plan.placed
    assert plan.groups["confined"].domain == "h0"


def test_roles_with_different_requests_are_placed_together():
    topology = grid_topology((1, 2, 1, 4))
    requests = {"chief": request(cpu=16000), "w": request(gpu=8, cpu=8000)}
    free = free_matrix([8] * 8, [16000] * 4 + [24000] * 4)    # block 0 has no cpu left for the chief
    root = Group("job", children=[leaf("chief", "chief", [0]), leaf("workers", "w", range(4))],
                 required_level="block")
    _, plan = place(root, topology, free, requests=requests)
    assert plan.placed
    assert {domain_of(topology, 1, n) for n in plan.slots.values()} == {"z0/z0-b1"}


# --- running pods, refusals, entry points ----------------------------------------------------------------------

def test_running_pods_pin_their_segment_and_elastic_pods_join_them():
    topology = grid_topology((1, 2, 2, 4))
    root = Group("job", children=[
        leaf("w-seg-0", "w", range(4), required_level="rack", min_member=2),
        leaf("w-seg-1", "w", range(4, 8), required_level="rack", min_member=2)])
    running = {Slot("w", 0): node(0, 1, 1, 0), Slot("w", 4): node(0, 0, 1, 2)}
    _, plan = place(root, topology, gpus(topology), bound=running)
    assert plan.placed and len(plan.slots) == 8
    assert plan.slots[Slot("w", 0)] == node(0, 1, 1, 0)
    assert {domain_of(topology, 2, plan.slots[Slot("w", i)]) for i in range(4)} == {"z0/z0-b1/z0-b1-r1"}
    assert {domain_of(topology, 2, plan.slots[Slot("w", i)]) for i in range(4, 8)} == {"z0/z0-b0/z0-b0-r1"}


def test_replan_returns_a_slot_to_its_segment_domain():
    topology = grid_topology((1, 2, 2, 4))
    root = segmented("w", 6, 2, segment_level="rack")
    inp, plan = place(root, topology, gpus(topology), requests={"w": request(gpu=4)})
    lost = Slot("w", 0)
    gone = plan.slots[lost]
    inp.usable["w"] = inp.usable["w"].copy()
    inp.usable["w"][gone] = False
    again = replan_slots(inp, plan, [lost])
    assert again.placed and again.slots[lost] != gone
    assert domain_of(topology, 2, again.slots[lost]) == domain_of(topology, 2, gone)
    assert all(again.slots[s] == n for s, n in plan.slots.items() if s != lost)


def test_issue_refusal_message():
    from topology.tree import Level, TopologyTree
    paths = [("z-1", "b-2", f"r-{r}", f"h-{r}-{h}") for r in range(1, 5) for h in range(4)]
    topology = TopologyTree("t", "test", [Level("zone-label", "zone"), Level("block-label", "block"),
                                          Level("rack-label", "rack"), Level("host-label", "host")],
                            [p[3] for p in paths], paths)
    free = gpus(topology, busy=[12, 13])              # rack r-4 keeps 2 free nodes
    root = segmented("w", 16, 4, segment_level="rack", required_level="block")
    inp = plan_input(root, topology, free, GPU8, excluded={"not ready": 1, "tainted": 1})
    plan = plan_gang(inp)
    assert not plan.placed
    assert plan.reason == ("block b-2 fits 14 of 16 pods (8 nvidia.com/gpu each); segments of 4 at rack need "
                           "4 racks with room for 4, found 3; nodes excluded: 2 insufficient nvidia.com/gpu, "
                           "1 not ready, 1 tainted")


@pytest.mark.parametrize("nested", [False, True])
def test_a_refusal_for_segments_says_the_pods_fit_but_not_in_segments_in_one_sentence(nested):
    """It read as a contradiction: `block z0-b0 fits 8 of 8 pods ..., but subgroup job: block z0-b0 fits 0
    of 8 pods ...` (the second count was of pods in whole segments). Every pod has room in the block; the
    segments do not, and that alone is said, once."""
    topology = grid_topology((1, 2, 4, 4))
    free = free_matrix([8, 8, 0, 0] * 4 + [0] * 16)                 # 8 free nodes in b0, 2 in each rack
    root = segmented("w", 8, 4, segment_level="rack", required_level=None if nested else "block")
    if nested:
        root = Group("gang", children=[root], required_level="block")
    plan = plan_gang(plan_input(root, topology, free, GPU8))
    assert not plan.placed
    assert plan.reason == (("subgroup job: " if nested else "") + "block z0-b0 has room for all 8 pods "
                           "(8 nvidia.com/gpu each), but not in segments of 4 at rack: they need 2 racks with room "
                           "for 4, found 0; nodes excluded: 24 insufficient nvidia.com/gpu")


def test_gang_without_topology_is_still_a_gang():
    free = free_matrix([8, 4, 8])
    _, plan = place(leaf("job", "w", range(4), min_member=3), None, free, requests={"w": request(gpu=4)})
    assert plan.placed and len(plan.slots) == 4
    assert sorted(plan.slots.values()) == [0, 0, 1, 2]
    _, refused = place(leaf("job", "w", range(6)), None, free, requests={"w": request(gpu=4)})
    assert not refused.placed and "fits 5 of 6 pods" in refused.reason
    _, levels = place(leaf("job", "w", range(2), required_level="rack"), None, free)
    assert not levels.placed and "needs a topology" in levels.reason


def test_evaluate_domain_confines_the_gang():
    topology = grid_topology((1, 2, 2, 4))
    inp = plan_input(leaf("job", "w", range(4)), topology, gpus(topology), GPU8)
    plan = evaluate_domain(inp, "block", "z0/z0-b1")
    assert plan.placed and {domain_of(topology, 1, n) for n in plan.slots.values()} == {"z0/z0-b1"}
    free = gpus(topology, busy=[node(0, 1, 0, h) for h in range(4)] + [node(0, 1, 1, 0)])
    assert not evaluate_domain(inp, "block", 1, free=free).placed
    assert "unknown block domain" in evaluate_domain(inp, "block", "nowhere").reason


@pytest.mark.parametrize("strategy", ["binpack", "spread"])
def test_bad_input_is_refused_not_raised(strategy):
    topology = grid_topology((1, 1, 1, 2))
    inp = plan_input(Group("job", children=[leaf("a", "w", [0])], min_subgroup=3), topology, gpus(topology),
                     GPU8, strategy=strategy)
    assert "minSubGroup 3" in plan_gang(inp).reason
    inp = plan_input(leaf("job", "w", [0]), topology, gpus(topology), GPU8, strategy="pack")
    assert "valid strategies: binpack, spread" in plan_gang(inp).reason


def test_replan_with_reservations_already_counted():
    topology = grid_topology((1, 1, 2, 4))
    root = segmented("w", 4, 2, segment_level="rack")
    inp, plan = place(root, topology, gpus(topology), requests={"w": request(gpu=8)})
    held = inp.free.copy()
    for slot, node in plan.slots.items():           # the service holds the plan's reservations
        if slot != Slot("w", 3):
            held[node] -= inp.requests["w"]
    inp.free = held
    again = replan_slots(inp, plan, [Slot("w", 3)], reserved=True)
    assert again.placed and again.slots[Slot("w", 3)] == plan.slots[Slot("w", 3)]
    assert "slots nobody-0 are not slots" in replan_slots(inp, plan, [Slot("nobody", 0)]).reason


def test_refusal_names_each_role_that_falls_short():
    topology = grid_topology((1, 1, 1, 2))
    requests = {"chief": request(cpu=32000), "w": request(gpu=8, cpu=8000)}
    root = Group("job", children=[leaf("chief", "chief", [0]), leaf("workers", "w", range(2))],
                 required_level="rack")
    _, plan = place(root, topology, free_matrix([8, 8], [16000, 16000]), requests=requests)
    assert not plan.placed
    assert plan.reason.startswith("rack z0-b0-r0 fits 2 of 3 pods together (chief 0 of 1, 32 cpu each; "
                                  "w 2 of 2, 8 nvidia.com/gpu each)")
    assert "insufficient cpu" in plan.reason
