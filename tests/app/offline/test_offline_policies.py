"""The comparison policies on small hand-checkable cases (demo cluster: 2 zones x 2 blocks x 2 racks x
4 nodes of 8 GPUs, and a block of one rack of DRA nodes in zone-b; node-01/02 have 4 GPUs used, node-09, 25, 26 are
full, node-17/18 have 2 used, node-16 is NotReady and node-24 tainted). Counts of the whole cluster or of
its best block are derived from the cluster, not written down."""
from __future__ import annotations

import numpy as np
import pytest

from app.offline.gangs import split_gang
from app.offline.policies import POLICIES, GangMostFree, KueueBestFit, PolicyError, get_policy
from topology.groups import Group, GroupTree, RoleSpec, SegmentInfo, Slot

from demo_figures import most_in_one, pods_of, tightest

GPU8 = {"containers": [{"name": "main", "resources": {"requests": {"nvidia.com/gpu": "8", "cpu": "1"}}}]}


def gang(pods: int, required=None, preferred=None, segment=None, segment_required=None, minimum=None,
         spec=GPU8) -> GroupTree:
    slots = [Slot("worker", i) for i in range(pods)]
    worker = Group("worker", min_member=minimum)
    if segment:
        count = -(-pods // segment)
        worker.children = [
            Group(f"worker-{k}", slots=slots[k * segment:(k + 1) * segment], required_level=segment_required,
                  segment=SegmentInfo("worker", k, segment, count),
                  min_member=None if minimum is None else max(0, min(segment, minimum - k * segment)))
            for k in range(count)]
    else:
        worker.slots = slots
    root = Group("job", children=[worker], required_level=required, preferred_level=preferred,
                 min_member=minimum)
    return GroupTree("ns", "job", "PyTorchJob", root, {"worker": RoleSpec("worker", pods, spec)},
                     topology="default")


def domains(cluster, plan, level: str) -> set[str]:
    tree = cluster.topologies["default"]
    index = tree.level_index(level)
    return {tree.domain_ids[index][tree.node_domain[index][node]] for node in plan.slots.values()}


def assert_fits(cluster, plan, gpus: int = 8):
    """No node gets more pods than it has room for, and only usable nodes are used."""
    used = np.zeros(len(cluster.nodes), dtype=int)
    for node in plan.slots.values():
        used[node] += 1
    gpu = cluster.resources.column["nvidia.com/gpu"]
    assert np.all(used * gpus <= np.maximum(cluster.free[:, gpu], 0))
    assert all(cluster.nodes[n].ready and not cluster.nodes[n].taints for n in plan.slots.values())


# --- gang-most-free ----------------------------------------------------------------------------------------

def test_most_free_fills_emptiest_nodes_first(demo_cluster):
    plan = GangMostFree().place(demo_cluster, gang(3))
    assert plan.placed
    assert [demo_cluster.node_names[plan.slots[Slot("worker", i)]] for i in range(3)] == \
        ["node-03", "node-04", "node-05"]


def test_most_free_ignores_topology_constraints(demo_cluster):
    plan = GangMostFree().place(demo_cluster, gang(6, required="rack"))
    assert plan.placed and len(domains(demo_cluster, plan, "rack")) > 1
    assert_fits(demo_cluster, plan)


def test_most_free_is_all_or_nothing(demo_cluster):
    before = demo_cluster.free.copy()
    fit = int(pods_of(demo_cluster).sum())                   # pods of 8 GPUs the cluster holds
    plan = GangMostFree().place(demo_cluster, gang(fit + 1))
    assert not plan.placed and plan.slots == {}
    assert f"{fit} of {fit + 1} pods placed" in plan.reason
    assert np.array_equal(before, demo_cluster.free)


def test_most_free_places_elastic_pods_best_effort(demo_cluster):
    fit = int(pods_of(demo_cluster).sum())
    plan = GangMostFree().place(demo_cluster, gang(fit + 3, minimum=fit - 3))
    assert plan.placed and len(plan.slots) == fit and len(plan.unplaced) == 3
    assert_fits(demo_cluster, plan)


# --- kueue-bestfit -----------------------------------------------------------------------------------------

def test_bestfit_takes_the_tightest_rack_that_fits(demo_cluster):
    # racks with room for 3 pods: a-block-1-rack-2 and b-block-2-rack-2 (4 each), a-block-2-rack-1,
    # a-block-2-rack-2, b-block-1-rack-2 (3 each): best fit is the first of the 3s.
    plan = KueueBestFit().place(demo_cluster, gang(3, required="rack"))
    assert plan.placed
    assert domains(demo_cluster, plan, "rack") == {"zone-a/a-block-2/a-block-2-rack-1"}
    assert_fits(demo_cluster, plan)


def test_bestfit_refuses_a_required_level_that_is_too_small(demo_cluster):
    before = demo_cluster.free.copy()
    best = most_in_one(demo_cluster, "block")
    plan = KueueBestFit().place(demo_cluster, gang(best + 1, required="block"))
    assert not plan.placed
    assert plan.reason == f"role worker: needs {best + 1} pods in one block, the best holds {best}"
    assert np.array_equal(before, demo_cluster.free)


def test_bestfit_climbs_from_a_preferred_level(demo_cluster):
    # no rack (max 4) nor block (max 6) holds 8: the tightest zone that does takes it
    assert most_in_one(demo_cluster, "block") < 8
    plan = KueueBestFit().place(demo_cluster, gang(8, preferred="rack"))
    assert plan.placed and len(plan.slots) == 8
    assert domains(demo_cluster, plan, "zone") == {tightest(demo_cluster, "zone", 8)}
    assert_fits(demo_cluster, plan)


def test_bestfit_splits_at_the_top_when_nothing_holds_the_gang(demo_cluster):
    plan = KueueBestFit().place(demo_cluster, gang(20, preferred="zone"))
    assert plan.placed and domains(demo_cluster, plan, "zone") == {"zone-a", "zone-b"}
    assert_fits(demo_cluster, plan)


def test_bestfit_keeps_each_slice_in_one_rack(demo_cluster):
    # slices of 2 per rack: block a-block-2 holds exactly 2 (the tightest that fits)
    plan = KueueBestFit().place(demo_cluster, gang(4, required="block", segment=2, segment_required="rack"))
    assert plan.placed
    assert domains(demo_cluster, plan, "block") == {"zone-a/a-block-2"}
    tree = demo_cluster.topologies["default"]
    for k in range(2):
        racks = {int(tree.node_domain[2][plan.slots[Slot("worker", i)]]) for i in (2 * k, 2 * k + 1)}
        assert len(racks) == 1
    assert len(domains(demo_cluster, plan, "rack")) == 2


def test_bestfit_counts_whole_slices(demo_cluster):
    # two slices of 4 in one block: only a-block-1-rack-2 and b-block-2-rack-2 hold a slice of 4
    plan = KueueBestFit().place(demo_cluster, gang(8, required="block", segment=4, segment_required="rack"))
    assert not plan.placed and "needs 2 slices in one block, the best holds 1" in plan.reason


def test_bestfit_short_last_slice(demo_cluster):
    plan = KueueBestFit().place(demo_cluster, gang(5, required="block", segment=2, segment_required="rack"))
    assert plan.placed and len(plan.slots) == 5
    tree = demo_cluster.topologies["default"]
    for members in ((0, 1), (2, 3), (4,)):
        assert len({int(tree.node_domain[2][plan.slots[Slot("worker", i)]]) for i in members}) == 1


def test_bestfit_short_last_slice_needs_only_its_own_room(demo_cluster):
    # 6 pods in slices of 4 per rack: a slice of 4 and a short one of 2. Only a-block-1 has a rack with
    # room for 4 (rack-2) next to one with room for 2 (rack-1); a second whole slice of 4 is not needed
    plan = KueueBestFit().place(demo_cluster, gang(6, required="block", segment=4, segment_required="rack"))
    assert plan.placed and len(plan.slots) == 6
    assert_fits(demo_cluster, plan)
    assert domains(demo_cluster, plan, "block") == {"zone-a/a-block-1"}
    tree = demo_cluster.topologies["default"]
    for members in ((0, 1, 2, 3), (4, 5)):
        assert len({int(tree.node_domain[2][plan.slots[Slot("worker", i)]]) for i in members}) == 1


def test_bestfit_partial_admission_takes_the_most_elastic_pods_that_fit(demo_cluster):
    best = most_in_one(demo_cluster, "block")
    plan = KueueBestFit().place(demo_cluster, gang(best + 4, required="block", minimum=4))
    assert plan.placed and len(plan.slots) == best and len(plan.unplaced) == 4
    assert len(domains(demo_cluster, plan, "block")) == 1
    assert sorted(plan.slots) == [Slot("worker", i) for i in range(best)]


def master_workers(workers: int, **root_levels) -> GroupTree:
    root = Group("job", children=[Group("master", slots=[Slot("master", 0)]),
                                  Group("worker", slots=[Slot("worker", i) for i in range(workers)])],
                 **root_levels)
    return GroupTree("ns", "job", "PyTorchJob", root,
                     {"master": RoleSpec("master", 1, GPU8), "worker": RoleSpec("worker", workers, GPU8)},
                     topology="default")


def test_bestfit_keeps_a_workloads_roles_in_its_required_domain(demo_cluster):
    # Kueue's PodSet group: master and workers share the tightest rack that holds all 4 whole-node pods
    plan = KueueBestFit().place(demo_cluster, master_workers(3, required_level="rack"))
    assert plan.placed and len(plan.slots) == 4
    assert_fits(demo_cluster, plan)
    assert domains(demo_cluster, plan, "rack") == {"zone-a/a-block-1/a-block-1-rack-2"}


def test_bestfit_refuses_a_group_no_domain_holds_together(demo_cluster):
    # each role alone fits a rack of 4 free nodes, but master + 4 workers need 5 nodes in one rack
    plan = KueueBestFit().place(demo_cluster, master_workers(4, required_level="rack"))
    assert not plan.placed
    assert plan.reason == "needs all 5 pods of its 2 roles in one rack; none holds them"


def test_bestfit_group_with_a_preferred_level_climbs_then_splits(demo_cluster):
    climbed = KueueBestFit().place(demo_cluster, master_workers(4, preferred_level="rack"))
    assert climbed.placed and len(domains(demo_cluster, climbed, "block")) == 1
    split = KueueBestFit().place(demo_cluster, master_workers(20, preferred_level="rack"))
    assert split.placed and len(split.slots) == 21 and len(domains(demo_cluster, split, "zone")) == 2
    assert_fits(demo_cluster, split)


def test_bestfit_without_topology_packs_the_fullest_nodes(demo_cluster):
    spec = {"containers": [{"name": "m", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]}
    tree = gang(2, spec=spec)
    tree.topology = None
    plan = KueueBestFit().place(demo_cluster, tree)
    # nodes sorted by room (4 pods of 2 GPUs on an empty node): the first node already fits both,
    # so best fit picks the tightest node that still does: node-01 (4 GPUs free)
    assert plan.placed and set(plan.slots.values()) == {demo_cluster.node_index["node-01"]}
    assert_fits(demo_cluster, plan, gpus=2)


# --- mandatory and elastic units ---------------------------------------------------------------------------

def test_split_gang_k_of_n_children():
    children = [Group(f"prefill-{i}", slots=[Slot(f"prefill-{i}", j) for j in range(2)]) for i in range(4)]
    root = Group("pg", children=children, min_subgroup=3)
    mandatory, optional = split_gang(root)
    assert mandatory == [Slot(f"prefill-{i}", j) for i in range(3) for j in range(2)]
    assert len(optional) == 1 and optional[0].slots == [Slot("prefill-3", 0), Slot("prefill-3", 1)]


def test_split_gang_elastic_leaf_slots_depend_on_their_optional_parent():
    leaf = Group("extra", slots=[Slot("extra", j) for j in range(3)], min_member=1)
    root = Group("pg", children=[Group("base", slots=[Slot("base", 0)]), leaf], min_subgroup=1)
    mandatory, optional = split_gang(root)
    assert mandatory == [Slot("base", 0)]
    head, *rest = optional
    assert head.slots == [Slot("extra", 0)]
    assert [u.slots for u in rest] == [[Slot("extra", 1)], [Slot("extra", 2)]]
    assert all(u.needs is head for u in rest)


# --- names -------------------------------------------------------------------------------------------------

def test_policy_names():
    assert list(POLICIES) == ["tas", "gang-most-free", "kueue-bestfit"]
    assert get_policy("kueue-bestfit").name == "kueue-bestfit"
    with pytest.raises(PolicyError, match="unknown policy 'fifo'; valid policies: tas, gang-most-free, kueue-bestfit"):
        get_policy("fifo")


# --- properties --------------------------------------------------------------------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

LEVELS = st.sampled_from([None, "zone", "block", "rack"])


@settings(max_examples=60, deadline=None)
@given(pods=st.integers(1, 30), gpus=st.sampled_from([1, 2, 4, 8]), required=LEVELS, preferred=LEVELS,
       segment=st.sampled_from([None, 2, 3, 4]), segment_level=st.sampled_from(["block", "rack"]),
       minimum=st.one_of(st.none(), st.integers(1, 30)),
       policy=st.sampled_from([KueueBestFit(), GangMostFree()]))
def test_comparison_policies_respect_capacity_and_their_constraints(pods, gpus, required, preferred, segment,
                                                                    segment_level, minimum, policy):
    from topology.cluster import Cluster
    from topology.demo import demo_objects
    from topology.objects import ClusterObjects

    cluster = Cluster.from_objects(ClusterObjects.from_objects(demo_objects()))
    spec = {"containers": [{"name": "m", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}
    segment = segment if segment and segment <= pods else None
    minimum = min(minimum, pods) if minimum else None
    tree = gang(pods, required=required, preferred=preferred, segment=segment,
                segment_required=segment_level if segment else None, minimum=minimum, spec=spec)
    before = cluster.free.copy()
    plan = policy.place(cluster, tree)
    assert np.array_equal(before, cluster.free)            # planning reserves nothing
    if not plan.placed:
        assert plan.reason and not plan.slots
        return
    assert_fits(cluster, plan, gpus)
    assert len(plan.slots) >= (minimum or pods)
    assert set(plan.slots) | set(plan.unplaced) == set(tree.slots())
    if isinstance(policy, KueueBestFit):
        if required:
            assert len(domains(cluster, plan, required)) == 1
        if segment:
            topology = cluster.topologies["default"]
            level = topology.level_index(segment_level)
            for leaf in tree.group("worker").children:
                placed = [plan.slots[s] for s in leaf.slots if s in plan.slots]
                assert len({int(topology.node_domain[level][n]) for n in placed}) <= 1
