"""build_plan_input / plan_for on a Cluster (the demo), and the independent checker itself."""
from __future__ import annotations

import numpy as np
import pytest
from oracle import check_plan

from topology.groups import Group, GroupTree, RoleSpec, SegmentInfo, Slot
from topology.planner import build_plan_input, occupied_masks, plan_for, plan_gang

GPU = "nvidia.com/gpu"


def spec(gpus=8, extra=None, **more):
    requests = {"cpu": "8", "memory": "64Gi", GPU: str(gpus), **(extra or {})}
    return {"containers": [{"name": "main", "resources": {"requests": requests}}], **more}


def gang(pods, segment=4, pod_spec=None, topology="default", **root):
    count = (pods + segment - 1) // segment
    children = [Group(f"w-seg-{s}", slots=[Slot("w", i) for i in range(s * segment, min(pods, (s + 1) * segment))],
                      required_level="rack", segment=SegmentInfo("w", s, segment, count)) for s in range(count)]
    return GroupTree("research", "train", "PyTorchJob", Group("train", children=children, **root),
                     {"w": RoleSpec("w", pods, pod_spec if pod_spec is not None else spec())}, topology=topology)


def test_plan_for_places_on_the_demo_cluster(demo_cluster):
    tree = gang(8, preferred_level="block")
    inp = build_plan_input(demo_cluster, tree)
    plan = plan_for(demo_cluster, tree)
    assert plan.placed and check_plan(inp, plan) == []
    names = [demo_cluster.node_names[n] for n in plan.slots.values()]
    assert "node-16" not in names and "node-24" not in names      # not ready, tainted
    assert inp.excluded == {"not ready": 1, "tainted": 1}
    assert inp.requests["w"][inp.resources.column[GPU]] == 8


def test_refusal_on_the_demo_cluster_counts_excluded_nodes(demo_cluster):
    plan = plan_for(demo_cluster, gang(16, required_level="block"))
    assert not plan.placed
    # blocks of 8 nodes: 16 pods of 8 GPUs never fit in one, whatever finishes
    assert plan.reason.startswith("can never fit in this cluster: even when empty, block ")
    assert "segments of 4 at rack need 4 racks with room for 4" in plan.reason
    free, _ = demo_cluster.usable_free()
    short = int((free[:, demo_cluster.resources.column[GPU]] < 8).sum()) - 2      # not the NotReady, tainted
    assert plan.reason.endswith(f"nodes excluded: {short} insufficient nvidia.com/gpu, 1 not ready, 1 tainted")


def test_a_resource_no_node_offers_makes_the_role_unplaceable(demo_cluster):
    tree = gang(2, pod_spec=spec(extra={"example.com/fpga": "1"}))
    inp = build_plan_input(demo_cluster, tree)
    assert not inp.usable["w"].any()
    plan = plan_gang(inp)
    assert not plan.placed
    assert plan.reason.startswith("role w: requests example.com/fpga, which no node offers")


def test_candidates_restrict_a_role(demo_cluster):
    allowed = np.zeros(len(demo_cluster.nodes), dtype=bool)
    allowed[[demo_cluster.node_index[f"node-{i:02d}"] for i in range(28, 33)]] = True
    tree = gang(4)
    inp = build_plan_input(demo_cluster, tree, candidates={"w": allowed})
    plan = plan_gang(inp)
    assert plan.placed and all(allowed[n] for n in plan.slots.values())
    unusable = 2                                    # node-16 NotReady, node-24 tainted: excluded for that
    assert inp.excluded["not a candidate"] == len(demo_cluster.nodes) - int(allowed.sum()) - unusable


def test_tolerations_and_selectors_shape_the_usable_mask(demo_cluster):
    tolerating = spec(tolerations=[{"key": "maintenance", "operator": "Exists"}])
    inp = build_plan_input(demo_cluster, gang(1, pod_spec=tolerating))
    assert inp.usable["w"][demo_cluster.node_index["node-24"]]
    assert "tainted" not in inp.excluded
    pinned = spec(nodeSelector={"kubernetes.io/hostname": "node-05"})
    plan = plan_for(demo_cluster, gang(1, pod_spec=pinned))
    assert [demo_cluster.node_names[n] for n in plan.slots.values()] == ["node-05"]


def test_occupied_nodes_become_per_level_domain_masks(demo_cluster):
    busy = np.zeros(len(demo_cluster.nodes), dtype=bool)
    busy[demo_cluster.node_index["node-01"]] = True
    topology = demo_cluster.topology("default")
    masks = occupied_masks(topology, busy)
    assert [int(m.sum()) for m in masks] == [1, 1, 1, 1]
    inp = build_plan_input(demo_cluster, gang(1), occupied_nodes=busy)
    assert all((a == b).all() for a, b in zip(inp.occupied, masks))


def test_bad_strategy_and_topology_are_clear_errors(demo_cluster):
    with pytest.raises(ValueError, match="valid strategies: binpack, spread"):
        build_plan_input(demo_cluster, gang(1), strategy="tight")
    with pytest.raises(ValueError, match="unknown topology 'nowhere'; valid topologies"):
        build_plan_input(demo_cluster, gang(1, topology="nowhere"))


def test_free_matrix_is_a_private_snapshot(demo_cluster):
    inp = build_plan_input(demo_cluster, gang(4))
    before = demo_cluster.free.copy()
    plan_gang(inp)
    assert (demo_cluster.free == before).all()
    assert inp.free is not demo_cluster.free


# --- the checker catches what it should ---------------------------------------------------------------------

def test_checker_flags_broken_plans(demo_cluster):
    inp = build_plan_input(demo_cluster, gang(4, required_level="block"))
    plan = plan_gang(inp)
    assert plan.placed and check_plan(inp, plan) == []
    nodes = list(plan.slots.values())
    broken = plan.__class__(placed=True, slots={**plan.slots, Slot("w", 0): nodes[1]}, unplaced=[])
    assert any("over capacity" in p for p in check_plan(inp, broken))
    far = demo_cluster.node_index["node-29" if demo_cluster.node_names[nodes[0]] < "node-17" else "node-05"]
    moved = plan.__class__(placed=True, slots={**plan.slots, Slot("w", 0): far}, unplaced=[])
    assert any("required level" in p for p in check_plan(inp, moved))
    partial = {s: n for s, n in plan.slots.items() if s != Slot("w", 3)}
    assert "gang minimums not met" in check_plan(inp, plan.__class__(placed=True, slots=partial,
                                                                     unplaced=[Slot("w", 3)]))


def test_candidates_alone_never_make_a_gang_never_fit(demo_cluster):
    """Defect: kube-scheduler offers only the nodes with room now; a gang that fits the empty cluster but not
    those candidates was refused as "can never fit in this cluster ... nodes excluded: N not a candidate"."""
    allowed = np.zeros(len(demo_cluster.nodes), dtype=bool)
    allowed[[demo_cluster.node_index[f"node-{i:02d}"] for i in range(28, 31)]] = True
    tree = gang(4, required_level="block")
    assert plan_for(demo_cluster, tree).placed                   # the cluster holds it
    plan = plan_gang(build_plan_input(demo_cluster, tree, candidates={"w": allowed}))
    assert not plan.placed
    assert "not a candidate" in plan.reason
    assert "can never fit" not in plan.reason and not plan.details["never_fits"]
    assert " fits " in plan.reason and "of 4 pods" in plan.reason, plan.reason


def test_a_gang_too_big_for_any_node_its_rules_allow_still_never_fits(demo_cluster):
    pinned = spec(nodeSelector={"kubernetes.io/hostname": "node-05"})
    allowed = np.ones(len(demo_cluster.nodes), dtype=bool)
    plan = plan_gang(build_plan_input(demo_cluster, gang(2, pod_spec=pinned), candidates={"w": allowed}))
    assert not plan.placed and plan.reason.startswith("can never fit in this cluster"), plan.reason
