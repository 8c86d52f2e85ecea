"""grouper.native: scheduling.k8s.io PodGroups, Workloads and CompositePodGroups -> group trees."""
from __future__ import annotations

import pytest

from grouper import GroupingError, group_workload
from grouper.native import (constrain, group_native, group_native_tree, native_identity, policy_of, problems,
                            scheduling_group)
from topology.groups import Slot

from grouper_helpers import demo_topologies

TOPOLOGIES = demo_topologies()
RACK, BLOCK = "network.example.com/rack", "network.example.com/block"


def podgroup(name="pg", *, minimum=8, key=RACK, version="v1alpha2", basic=False, **spec):
    policy = {"basic": {}} if basic else {"gang": {"minCount": minimum}}
    body = {"schedulingPolicy": policy, **spec}
    if key:
        body["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {"apiVersion": f"scheduling.k8s.io/{version}", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "team"}, "spec": body}


def pod(name, group="pg", priority=None):
    spec = {"containers": [{"name": "c", "image": "x"}], "schedulingGroup": {"podGroupName": group}}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team"}, "spec": spec}


def test_a_gang_podgroup_is_a_flat_gang_of_its_pods_with_min_count_and_the_keys_level():
    pods = [pod(f"w-{i}") for i in (2, 0, 1)]
    tree = group_native(podgroup(minimum=8), pods, TOPOLOGIES)
    assert tree.key == "team/pg" and tree.kind == "PodGroup" and tree.topology == "default"
    assert tree.root.is_leaf and tree.root.min_member == 8 and tree.root.required_level == RACK
    assert tree.root.slots == [Slot("pg", i) for i in range(3)]
    assert "3 pods of its minCount 8 exist" in tree.warnings[0]
    assert native_identity(pods[0], tree, pods).slot == Slot("pg", 2)      # w-2: third by name


def test_basic_policy_is_no_gang_and_v1beta1_reads_the_same():
    assert group_native(podgroup(basic=True), [pod("a")], TOPOLOGIES) is None
    tree = group_native(podgroup(version="v1beta1", minimum=2, key=BLOCK), [pod("a"), pod("b")], TOPOLOGIES)
    assert tree.root.min_member == 2 and tree.root.required_level == BLOCK


def test_priority_comes_from_the_podgroup_then_its_class_then_the_pods():
    classes = [{"metadata": {"name": "high"}, "value": 900}]
    assert group_native(podgroup(priority=50), [pod("a", priority=7)], TOPOLOGIES).priority == 50
    assert group_native(podgroup(priorityClassName="high"), [pod("a")], TOPOLOGIES, classes).priority == 900
    assert group_native(podgroup(), [pod("a", priority=7)], TOPOLOGIES).priority == 7


@pytest.mark.parametrize("change, field", [
    ({"schedulingPolicy": {"gang": {"minCount": 0}}}, "gang.minCount=0"),
    ({"schedulingPolicy": {}}, "set exactly one of basic or gang.minCount"),
    ({"schedulingConstraints": {"topology": [{"key": RACK}, {"key": BLOCK}]}}, "at most 1 entry"),
    ({"schedulingConstraints": {"topology": [{"key": "example.com/pod"}]}}, "no topology has as a level"),
])
def test_bad_podgroups_are_grouping_errors_naming_the_field(change, field):
    bad = podgroup()
    bad["spec"].update(change)
    with pytest.raises(GroupingError, match="PodGroup team/pg") as error:
        group_native(bad, [pod("a")], TOPOLOGIES)
    assert field in str(error.value)
    assert field in problems(bad, TOPOLOGIES)[0]


def test_an_unknown_key_lists_the_valid_ones_and_an_alias_is_not_a_key():
    with pytest.raises(GroupingError, match=f"valid keys: .*{RACK}"):
        group_native(podgroup(key="rack"), [pod("a")], TOPOLOGIES)


def test_min_count_above_the_pods_that_can_exist_is_a_problem():
    assert "above the 4 pods" in problems(podgroup(minimum=8), TOPOLOGIES, possible=4)[0]
    assert problems(podgroup(minimum=4), TOPOLOGIES, possible=4) == []


def test_several_templates_of_a_workload_are_one_tree_with_a_leaf_per_podgroup():
    groups = [podgroup("leader", minimum=1, key=None), podgroup("workers", minimum=4, key=RACK)]
    pods = [pod("l-0", "leader")] + [pod(f"w-{i}", "workers") for i in range(4)]
    tree = group_native_tree("serve", "team", groups, [], pods, TOPOLOGIES)
    assert tree.key == "team/serve" and [g.name for g in tree.root.children] == ["leader", "workers"]
    assert tree.group("workers").required_level == RACK and tree.group("workers").min_member == 4
    assert native_identity(pods[3], tree, pods).slot == Slot("workers", 2)


def test_a_composite_is_the_parents_level_and_its_podgroups_the_segments():
    composite = {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup",
                 "metadata": {"name": "job", "namespace": "team"},
                 "spec": {"schedulingPolicy": {"gang": {"minGroupCount": 2}},
                          "schedulingConstraints": {"topology": [{"key": BLOCK}]}}}
    groups = [podgroup(f"seg-{i}", minimum=4, key=RACK, version="v1beta1", parentCompositePodGroupName="job")
              for i in range(3)]
    pods = [pod(f"p-{s}-{i}", f"seg-{s}") for s in range(3) for i in range(4)]
    tree = group_native_tree("wl", "team", groups, [composite], pods, TOPOLOGIES)
    assert tree.root.name == "job" and tree.root.required_level == BLOCK and tree.root.min_subgroup == 2
    assert [(g.name, g.required_level, g.min_member) for g in tree.root.children] == \
        [(f"seg-{i}", RACK, 4) for i in range(3)]


def test_a_workload_with_our_annotations_inside_a_podgroup_takes_its_minimum_and_finer_key():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "team", "uid": "u",
                                                                 "annotations": {"kai.scheduler/topology": "default",
                                                                                 "kai.scheduler/topology-required-placement": "zone"}},
           "spec": {"parallelism": 8, "completions": 8, "completionMode": "Indexed",
                    "template": {"metadata": {"annotations": {"kai.scheduler/segment-size": "4",
                                                              "kai.scheduler/segment-topology-required-placement": "rack"}},
                                 "spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    (tree,) = group_workload(job, TOPOLOGIES)
    constrained = constrain(tree, podgroup(minimum=8, key=BLOCK), TOPOLOGIES)
    assert constrained.root.required_level == BLOCK                  # block is finer than zone: both hold
    assert [g.required_level for g in constrained.groups() if g.is_leaf] == ["rack", "rack"]
    (tree,) = group_workload(job, TOPOLOGIES)
    too_many = constrain(tree, podgroup(minimum=9, key=None), TOPOLOGIES)
    assert "minCount=9 is above the 8 pods" in too_many.warnings[-1]


def test_scheduling_group_reads_the_pod_spec():
    assert scheduling_group(pod("a", "g")) == "g"
    assert scheduling_group({"spec": {"schedulingGroup": None}}) is None
    assert policy_of(podgroup(basic=True)).gang is False


def test_the_gate_of_our_own_gang_needs_its_minimum_and_is_owned_by_the_workload():
    from grouper.native import gang_minimum, gate_podgroup, is_gate
    from topology.groups import Group, GroupTree
    leaves = [Group(name=f"s{i}", slots=[Slot(f"s{i}", j) for j in range(4)]) for i in range(3)]
    tree = GroupTree(namespace="team", name="g", kind="Job", root=Group(name="g", children=leaves))
    assert gang_minimum(tree) == 12
    tree.root.min_subgroup = 2
    assert gang_minimum(tree) == 8
    tree.root.min_member = 5
    assert gang_minimum(tree) == 5
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "uid": "u1"}}
    body = gate_podgroup("pg-train-u1", "team", 5, job, "v1alpha2")
    assert body["apiVersion"] == "scheduling.k8s.io/v1alpha2" and is_gate(body)
    assert body["spec"] == {"schedulingPolicy": {"gang": {"minCount": 5}}}
    assert body["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u1"}]
