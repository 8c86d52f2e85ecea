"""group_podgroup / validate_podgroup: KAI v2alpha2 and scheduler-plugins PodGroups."""
from __future__ import annotations

import copy

import pytest

from grouper import GroupingError, group_podgroup, validate_podgroup
from topology.groups import Slot

from grouper_helpers import demo_topologies, leaves, load

TOPOLOGIES = demo_topologies()


def _disaggregated():
    podgroup, *pods = load("podgroup-disaggregated.yaml")
    return podgroup, pods


def _kai(subgroups, **spec):
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "team"}, "spec": {**spec, "subGroups": subgroups}}


# --- the examples -----------------------------------------------------------------------------------

def test_disaggregated_inference_needs_3_of_4_prefill_replicas():
    podgroup, pods = _disaggregated()
    tree = group_podgroup(podgroup, pods, TOPOLOGIES)
    assert tree.key == "serving/disagg-inference" and tree.kind == "PodGroup" and tree.topology == "default"
    assert tree.root.required_level == "zone" and tree.root.min_subgroup is None
    assert [g.name for g in tree.root.children] == ["router", "decode", "prefill"]
    prefill = tree.group("prefill")
    assert prefill.min_subgroup == 3 and prefill.min_member is None
    assert [g.name for g in prefill.children] == ["prefill-0", "prefill-1", "prefill-2", "prefill-3"]
    for replica in prefill.children:
        assert replica.min_member == 2 and replica.required_level == "rack"
        assert replica.slots == [Slot(replica.name, 0), Slot(replica.name, 1)]
    decode = tree.group("decode")
    assert decode.is_leaf and decode.min_member == 4 and decode.required_level == "block"
    assert decode.slots == [Slot("decode", i) for i in range(4)]
    assert tree.roles["prefill-2"].replicas == 2
    assert tree.roles["prefill-2"].pod_spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "8"
    assert tree.roles["router"].replicas == 1
    assert tree.warnings == []


def test_two_level_decode_prefill():
    podgroup, *pods = load("podgroup-two-level.yaml")
    tree = group_podgroup(podgroup, pods, TOPOLOGIES)
    assert [g.name for g in tree.root.children] == ["decode", "prefill"]
    for role in ("decode", "prefill"):
        middle = tree.group(role)
        assert middle.required_level == "block" and middle.min_subgroup is None
        assert [g.name for g in middle.children] == [f"{role}-0", f"{role}-1"]
        for leaf in middle.children:
            assert leaf.required_level == "rack" and leaf.min_member == 2 and len(leaf.slots) == 2
    assert set(leaves(tree)) == {"decode-0", "decode-1", "prefill-0", "prefill-1"}
    assert len(tree.slots()) == 8


def test_slots_are_positions_among_the_leaf_pods_sorted_by_name():
    podgroup, pods = _disaggregated()
    tree = group_podgroup(podgroup, list(reversed(pods)))
    assert tree.group("decode").slots == [Slot("decode", i) for i in range(4)]
    assert tree.roles["decode"].pod_spec == pods[1]["spec"]   # the first decode pod by name


def test_pods_of_other_podgroups_are_left_out():
    podgroup, pods = _disaggregated()
    stranger = copy.deepcopy(pods[1])
    stranger["metadata"]["name"] = "other-decode"
    stranger["metadata"]["annotations"]["pod-group-name"] = "other"
    tree = group_podgroup(podgroup, pods + [stranger])
    assert len(tree.group("decode").slots) == 4


def test_missing_pods_are_a_warning():
    podgroup, pods = _disaggregated()
    tree = group_podgroup(podgroup, pods[:3])
    assert len(tree.group("decode").slots) == 2
    assert any("group 'decode' has 2 pods of its minMember 4" in w for w in tree.warnings)


def test_pod_naming_an_unknown_or_inner_subgroup():
    podgroup, pods = _disaggregated()
    pods[1]["metadata"]["labels"]["kai.scheduler/subgroup-name"] = "prefill"
    with pytest.raises(GroupingError, match=r"Pod serving/disagg-decode-0: label kai.scheduler/subgroup-name="
                                            r"'prefill' names no leaf subgroup of PodGroup serving/disagg-inference; "
                                            r"valid: router, decode, prefill-0"):
        group_podgroup(podgroup, pods)
    del pods[1]["metadata"]["labels"]["kai.scheduler/subgroup-name"]
    with pytest.raises(GroupingError, match="label kai.scheduler/subgroup-name is missing"):
        group_podgroup(podgroup, pods)


def test_priority_from_the_first_pod():
    podgroup, pods = _disaggregated()
    for pod in pods:
        pod["spec"]["priority"] = 500
    assert group_podgroup(podgroup, pods).priority == 500


def test_flat_kai_podgroup():
    podgroup = _kai([], minMember=2)
    pods = [{"metadata": {"name": f"p-{i}", "namespace": "team", "annotations": {"pod-group-name": "pg"}},
             "spec": {"containers": []}} for i in range(3)]
    tree = group_podgroup(podgroup, pods)
    assert tree.root.is_leaf and tree.root.min_member == 2
    assert tree.root.slots == [Slot("pg", i) for i in range(3)] and tree.roles["pg"].replicas == 3


def test_scheduler_plugins_podgroup_is_a_flat_gang():
    podgroup, *pods = load("podgroup-scheduler-plugins.yaml")
    tree = group_podgroup(podgroup, pods)
    assert tree.key == "research/mpi-gang" and tree.root.is_leaf
    assert tree.root.min_member == 3 and tree.root.leaf_min() == 3
    assert tree.root.slots == [Slot("mpi-gang", i) for i in range(4)]


def test_validate_podgroup_without_pods():
    podgroup, _ = _disaggregated()
    assert validate_podgroup(podgroup, TOPOLOGIES) == []


def test_levels_without_topology_are_ignored_with_a_warning():
    podgroup = _kai([{"name": "a", "minMember": 1, "topologyConstraint": {"requiredTopologyLevel": "rack"}}])
    [warning] = validate_podgroup(podgroup)
    assert "topology levels of a ignored" in warning
    assert group_podgroup(podgroup, []).group("a").required_level is None


# --- every invalid PodGroup ---------------------------------------------------------------------------

INVALID = {
    "minMember and minSubGroup together": (
        _kai([{"name": "a", "minMember": 1}, {"name": "b", "minMember": 1}], minMember=2, minSubGroup=1),
        r"group 'pg': spec.minMember and spec.minSubGroup are mutually exclusive"),
    "subgroup minMember and minSubGroup together": (
        _kai([{"name": "a", "minMember": 1, "minSubGroup": 1}]),
        r"group 'a': spec.subGroups\[0\].minMember and spec.subGroups\[0\].minSubGroup are mutually exclusive"),
    "minMember zero": (
        _kai([{"name": "a", "minMember": 0}]),
        r"group 'a': spec.subGroups\[0\].minMember=0 is invalid; expected an integer > 0"),
    "minSubGroup negative": (
        _kai([{"name": "a"}, {"name": "b", "parent": "a", "minMember": 1}], minSubGroup=-1),
        r"group 'pg': spec.minSubGroup=-1 is invalid; expected an integer > 0"),
    "minMember not an integer": (
        _kai([{"name": "a", "minMember": "2"}]),
        r"group 'a': spec.subGroups\[0\].minMember='2' is invalid"),
    "minSubGroup above the children": (
        _kai([{"name": "p", "minSubGroup": 3}, {"name": "c0", "parent": "p", "minMember": 1},
              {"name": "c1", "parent": "p", "minMember": 1}]),
        r"group 'p': spec.subGroups\[0\].minSubGroup=3 exceeds its 2 direct subgroups; valid: 1 to 2"),
    "root minSubGroup above the children": (
        _kai([{"name": "a", "minMember": 1}], minSubGroup=2),
        r"group 'pg': spec.minSubGroup=2 exceeds its 1 direct subgroups"),
    "minSubGroup on a leaf": (
        _kai([{"name": "a", "minSubGroup": 1}]),
        r"group 'a': spec.subGroups\[0\].minSubGroup is set on a leaf group \(no subgroups\); use minMember"),
    "minMember on a mid-level group": (
        _kai([{"name": "p", "minMember": 2}, {"name": "c", "parent": "p", "minMember": 1}]),
        r"group 'p': spec.subGroups\[0\].minMember is set on a group with subgroups \(c\); use minSubGroup"),
    "duplicate names": (
        _kai([{"name": "a", "minMember": 1}, {"name": "a", "minMember": 2}]),
        r"group 'a': spec.subGroups\[1\].name='a' is a duplicate of spec.subGroups\[0\].name"),
    "missing name": (
        _kai([{"minMember": 1}]),
        r"spec.subGroups\[0\].name is missing"),
    "unknown parent": (
        _kai([{"name": "a", "parent": "ghost", "minMember": 1}]),
        r"group 'a': spec.subGroups\[0\].parent='ghost' names no subgroup; valid parents: a"),
    "cycle": (
        _kai([{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}, {"name": "c", "minMember": 1}]),
        r"group 'a': spec.subGroups\[0\].parent forms a cycle \(a -> b -> a\)"),
    "self parent": (
        _kai([{"name": "a", "parent": "a", "minMember": 1}]),
        r"group 'a': spec.subGroups\[0\].parent forms a cycle \(a -> a\)"),
    "different topologies": (
        _kai([{"name": "a", "minMember": 1, "topologyConstraint": {"topology": "kueue-default"}}],
             topologyConstraint={"topology": "default"}),
        r"subgroups name different topologies"),
    "scheduler-plugins minMember zero": (
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
         "metadata": {"name": "sp", "namespace": "team"}, "spec": {"minMember": 0}},
        r"PodGroup team/sp: group 'sp': spec.minMember=0 is invalid"),
}

LEVEL_INVALID = {
    "unknown topology": (
        _kai([{"name": "a", "minMember": 1}], topologyConstraint={"topology": "fabric"}),
        r"spec.topologyConstraint.topology='fabric' names an unknown topology; valid topologies: default, "
        r"kueue-default"),
    "unknown level": (
        _kai([{"name": "a", "minMember": 1, "topologyConstraint": {"requiredTopologyLevel": "row"}}],
             topologyConstraint={"topology": "default"}),
        r"spec.subGroups\[0\].topologyConstraint.requiredTopologyLevel='row' is invalid: unknown level 'row' "
        r"in topology 'default'; valid levels: .*rack"),
    "unknown preferred level": (
        _kai([], topologyConstraint={"topology": "default", "preferredTopologyLevel": "row"}, minMember=1),
        r"spec.topologyConstraint.preferredTopologyLevel='row' is invalid"),
    "subgroup level coarser than the root": (
        _kai([{"name": "a", "minMember": 1, "topologyConstraint": {"requiredTopologyLevel": "zone"}}],
             topologyConstraint={"topology": "default", "requiredTopologyLevel": "block"}),
        r"spec.subGroups\[0\].topologyConstraint.requiredTopologyLevel='zone' is coarser than group 'pg'"),
    "leaf level coarser than its parent": (
        _kai([{"name": "p", "topologyConstraint": {"requiredTopologyLevel": "rack"}},
              {"name": "c", "parent": "p", "minMember": 1, "topologyConstraint": {"requiredTopologyLevel": "block"}}],
             topologyConstraint={"topology": "default"}),
        r"spec.subGroups\[1\].topologyConstraint.requiredTopologyLevel='block' is coarser than group 'p'"),
}


@pytest.mark.parametrize("case", INVALID)
def test_invalid_podgroup(case):
    podgroup, message = INVALID[case]
    with pytest.raises(GroupingError, match=message):
        validate_podgroup(podgroup)
    with pytest.raises(GroupingError, match=message):
        group_podgroup(podgroup, [])


@pytest.mark.parametrize("case", LEVEL_INVALID)
def test_invalid_podgroup_levels(case):
    podgroup, message = LEVEL_INVALID[case]
    validate_podgroup(podgroup)         # levels are only checked against known topologies
    with pytest.raises(GroupingError, match=message):
        validate_podgroup(podgroup, TOPOLOGIES)


def test_errors_name_the_podgroup():
    podgroup, message = INVALID["cycle"]
    with pytest.raises(GroupingError, match=r"^PodGroup team/pg: "):
        validate_podgroup(podgroup)


def test_not_a_podgroup():
    with pytest.raises(GroupingError, match="not a PodGroup"):
        validate_podgroup({"kind": "Job", "metadata": {"name": "x"}})


@pytest.mark.parametrize("subgroups, message", [
    (["decode"], r"spec.subGroups\[0\]='decode' is invalid; expected a mapping"),
    ({"decode": {"minMember": 1}}, "spec.subGroups must be a list"),
    ([{"name": "decode", "minMember": 1, "topologyConstraint": "rack"}],
     r"spec.subGroups\[0\].topologyConstraint='rack' is invalid; expected a mapping"),
])
def test_malformed_subgroups_are_grouping_errors(subgroups, message):
    with pytest.raises(GroupingError, match=message):
        validate_podgroup(_kai(subgroups))
