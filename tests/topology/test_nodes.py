"""Which nodes a pod may use: readiness, cordons, taints vs tolerations, nodeSelector, node affinity."""
import numpy as np
import pytest

from topology.cluster import Cluster
from topology.nodes import NodeInfo, PodPlacementRules, exclusion_counts, tolerates, usable_mask


def node_object(name, labels=None, conditions=None, unschedulable=False, taints=None, allocatable=None):
    status = {"allocatable": allocatable or {"cpu": "8", "memory": "32Gi", "pods": "110"}}
    if conditions is not None:
        status["conditions"] = conditions
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"unschedulable": unschedulable, "taints": taints or []}, "status": status}


def node(name="n", **kwargs) -> NodeInfo:
    return NodeInfo.from_object(node_object(name, **kwargs))


def reason(n: NodeInfo, spec=None):
    return PodPlacementRules.from_spec(spec or {}).allows(n)


# --- parsing ---------------------------------------------------------------------------------------

def test_node_from_object():
    n = node("gpu-1", labels={"zone": "a"}, allocatable={"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"})
    assert n.name == "gpu-1" and n.labels == {"zone": "a"}
    assert n.allocatable == {"cpu": 96_000, "memory": 2**40, "nvidia.com/gpu": 8}


def test_capacity_is_used_when_allocatable_is_missing():
    obj = node_object("n")
    obj["status"] = {"capacity": {"cpu": "4"}}
    assert NodeInfo.from_object(obj).allocatable == {"cpu": 4000}


def test_unquoted_label_values_become_strings():
    assert node(labels={"rack": 1}).labels == {"rack": "1"}


def test_node_errors_name_the_node_and_field():
    with pytest.raises(ValueError, match="metadata.name"):
        NodeInfo.from_object({"kind": "Node", "metadata": {}})
    with pytest.raises(ValueError, match=r"'gpu-1' status.allocatable.*'eight'"):
        node("gpu-1", allocatable={"nvidia.com/gpu": "eight"})


@pytest.mark.parametrize("conditions, ready", [
    ([{"type": "Ready", "status": "True"}], True),
    ([{"type": "Ready", "status": "False"}], False),
    ([{"type": "Ready", "status": "Unknown"}], False),
    ([{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}], True),
    ([{"type": "MemoryPressure", "status": "True"}], True),     # no Ready condition: assumed Ready
    ([], True),
    (None, True),
])
def test_readiness(conditions, ready):
    n = node(conditions=conditions)
    assert n.ready is ready
    assert (reason(n) == "not ready") is (not ready)


def test_cordoned_nodes_are_unusable():
    assert reason(node(unschedulable=True)) == "unschedulable"
    assert reason(node(unschedulable=False)) is None


def test_only_blocking_taints_are_kept():
    n = node(taints=[{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "PreferNoSchedule"},
                     {"key": "c", "effect": "NoExecute"}])
    assert [t["key"] for t in n.taints] == ["a", "c"]
    assert reason(node(taints=[{"key": "soft", "effect": "PreferNoSchedule"}])) is None


# --- tolerations ---------------------------------------------------------------------------------

TAINT = {"key": "gpu", "value": "h100", "effect": "NoSchedule"}


@pytest.mark.parametrize("toleration, tolerated", [
    ({"operator": "Exists"}, True),                                          # tolerates everything
    ({"operator": "Exists", "effect": "NoSchedule"}, True),
    ({"operator": "Exists", "effect": "NoExecute"}, False),
    ({"key": "gpu", "operator": "Exists"}, True),
    ({"key": "other", "operator": "Exists"}, False),
    ({"key": "gpu", "operator": "Equal", "value": "h100"}, True),
    ({"key": "gpu", "value": "h100"}, True),                                 # Equal is the default operator
    ({"key": "gpu", "operator": "Equal", "value": "a100"}, False),
    ({"key": "gpu", "operator": "Equal"}, False),                            # empty value != h100
    ({"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}, True),
    ({"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoExecute"}, False),
    ({"key": "gpu", "operator": "Equal", "value": "h100", "effect": "PreferNoSchedule"}, False),
])
def test_toleration_matching(toleration, tolerated):
    assert tolerates([toleration], TAINT) is tolerated
    n = node(taints=[TAINT])
    assert (reason(n, {"tolerations": [toleration]}) is None) is tolerated


def test_every_taint_needs_a_toleration():
    n = node(taints=[TAINT, {"key": "maintenance", "effect": "NoExecute"}])
    assert reason(n, {"tolerations": [{"key": "gpu", "operator": "Exists"}]}) == "untolerated taint maintenance"
    both = [{"key": "gpu", "operator": "Exists"}, {"key": "maintenance", "operator": "Exists"}]
    assert reason(n, {"tolerations": both}) is None


def test_taint_without_value_matches_equal_without_value():
    assert tolerates([{"key": "dedicated", "operator": "Equal"}], {"key": "dedicated", "effect": "NoSchedule"})


@pytest.mark.parametrize("operator", ["exists", "equal", "In", "Gt"])
def test_an_unknown_toleration_operator_tolerates_nothing(operator):
    # Kubernetes' ToleratesTaint answers false for any operator other than Equal / Exists
    assert not tolerates([{"key": "gpu", "operator": operator, "value": "h100"}], TAINT)
    assert not tolerates([{"operator": operator}], TAINT)


# --- selectors and affinity --------------------------------------------------------------------------

def test_node_selector_needs_every_label():
    n = node(labels={"pool": "gpu", "zone": "a"})
    assert reason(n, {"nodeSelector": {"pool": "gpu"}}) is None
    assert reason(n, {"nodeSelector": {"pool": "gpu", "zone": "b"}}) == "node selector"
    assert reason(n, {"nodeSelector": {"missing": "x"}}) == "node selector"


def affinity(*terms):
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}}


def expr(key, operator, *values):
    return {"key": key, "operator": operator, "values": list(values)}


@pytest.mark.parametrize("expression, matches", [
    (expr("zone", "In", "a", "b"), True), (expr("zone", "In", "c"), False), (expr("nope", "In", "a"), False),
    (expr("zone", "NotIn", "c"), True), (expr("zone", "NotIn", "a"), False), (expr("nope", "NotIn", "a"), True),
    (expr("zone", "Exists"), True), (expr("nope", "Exists"), False),
    (expr("zone", "DoesNotExist"), False), (expr("nope", "DoesNotExist"), True),
    (expr("gpus", "Gt", "4"), True), (expr("gpus", "Gt", "8"), False),
    (expr("gpus", "Lt", "9"), True), (expr("gpus", "Lt", "8"), False),
    (expr("zone", "Gt", "1"), False),                                        # not a number
])
def test_required_node_affinity_expressions(expression, matches):
    n = node(labels={"zone": "a", "gpus": "8"})
    assert (reason(n, affinity({"matchExpressions": [expression]})) is None) is matches


def test_affinity_terms_are_ored_and_expressions_anded():
    n = node("n1", labels={"zone": "a", "pool": "cpu"})
    in_a_gpu = {"matchExpressions": [expr("zone", "In", "a"), expr("pool", "In", "gpu")]}
    assert reason(n, affinity(in_a_gpu)) == "node affinity"
    assert reason(n, affinity(in_a_gpu, {"matchExpressions": [expr("pool", "In", "cpu")]})) is None


def test_match_fields_select_by_node_name():
    assert reason(node("n1"), affinity({"matchFields": [expr("metadata.name", "In", "n1")]})) is None
    assert reason(node("n2"), affinity({"matchFields": [expr("metadata.name", "In", "n1")]})) == "node affinity"


def test_match_expressions_read_labels_not_the_node_name():
    # "metadata.name" is a valid label key: matchExpressions must read the label, matchFields the name
    labelled = node("n1", labels={"metadata.name": "rack-7"})
    assert reason(labelled, affinity({"matchExpressions": [expr("metadata.name", "In", "rack-7")]})) is None
    assert reason(labelled, affinity({"matchExpressions": [expr("metadata.name", "In", "n1")]})) == "node affinity"
    assert reason(node("n1"), affinity({"matchExpressions": [expr("metadata.name", "Exists")]})) == "node affinity"
    assert reason(labelled, affinity({"matchFields": [expr("metadata.name", "In", "n1")]})) is None


def test_an_empty_affinity_term_matches_no_node():
    assert reason(node(), affinity({})) == "node affinity"
    assert reason(node(), affinity({}, {"matchExpressions": [expr("zone", "DoesNotExist")]})) is None


def test_preferred_affinity_does_not_filter():
    spec = {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [expr("zone", "In", "z")]}}]}}}
    assert reason(node(labels={"zone": "a"}), spec) is None


# --- masks per role ------------------------------------------------------------------------------------

def mixed_nodes():
    return [
        NodeInfo("a-ok", {"pool": "gpu"}, {"cpu": 1000}),
        NodeInfo("b-notready", {"pool": "gpu"}, {"cpu": 1000}, ready=False),
        NodeInfo("c-cordoned", {"pool": "gpu"}, {"cpu": 1000}, unschedulable=True),
        NodeInfo("d-tainted", {"pool": "gpu"}, {"cpu": 1000}, taints=(TAINT,)),
        NodeInfo("e-cpu-pool", {"pool": "cpu"}, {"cpu": 1000}),
        NodeInfo("f-tainted-cpu", {"pool": "cpu"}, {"cpu": 1000}, taints=(TAINT,)),
    ]


ROLES = {
    "plain": {},
    "gpu-worker": {"tolerations": [{"key": "gpu", "operator": "Exists"}], "nodeSelector": {"pool": "gpu"}},
    "tolerates-all": {"tolerations": [{"operator": "Exists"}]},
    "cpu-affinity": affinity({"matchExpressions": [expr("pool", "In", "cpu")]}),
}


def test_usable_mask_per_role():
    nodes = mixed_nodes()
    masks = {role: usable_mask(nodes, PodPlacementRules.from_spec(spec)).tolist() for role, spec in ROLES.items()}
    assert masks == {
        "plain":         [True, False, False, False, True, False],
        "gpu-worker":    [True, False, False, True, False, False],
        "tolerates-all": [True, False, False, True, True, True],
        "cpu-affinity":  [False, False, False, False, True, False],
    }


def test_cluster_usable_agrees_with_usable_mask():
    nodes = mixed_nodes()
    cluster = Cluster(nodes)
    for spec in ROLES.values():
        rules = PodPlacementRules.from_spec(spec)
        assert np.array_equal(cluster.usable(rules), usable_mask(cluster.nodes, rules))


def test_exclusion_counts_say_why():
    rules = PodPlacementRules.from_spec(ROLES["gpu-worker"])
    assert exclusion_counts(mixed_nodes(), rules) == {
        "not ready": 1, "unschedulable": 1, "node selector": 2}
    assert exclusion_counts(mixed_nodes(), PodPlacementRules()) == {
        "not ready": 1, "unschedulable": 1, "untolerated taint gpu": 2}
