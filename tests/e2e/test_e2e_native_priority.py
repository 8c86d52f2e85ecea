"""PodGroup priority end to end, on a control plane with the native gates and WorkloadAwarePreemption on (the
only setting in which the API server keeps a PodGroup's priorityClassName/priority).

With that gate kube-scheduler runs no per-pod preemption for a pod of a gang PodGroup, so it never calls the
extender's preempt verb. What it runs instead (pkg/scheduler/schedule_one_podgroup.go, runWorkloadAwarePreemption,
and framework/preemption/podgrouppreemption.go): when the group is unschedulable and its PodGroup has no
topology constraint, it removes every pod of a lower priority than the PodGroup's from a copy of its snapshot
and runs the group's scheduling algorithm again, which calls the extender's filter for each member on the
nodes so freed; our filter plans the gang there, finds it blocked in our model and preempts for the whole gang
(our victims, one domain), refusing the attempt while they terminate; then the gang is placed on our plan.
A PodGroup with a topology key gets no workload-aware preemption from kube-scheduler ("workload aware
preemption is not supported for pod groups with scheduling constraints")."""
from __future__ import annotations

import time

from test_e2e_native import PODGROUP_API, bound, member, racks
from workloads import RACK

HIGH, LOW = "native-high", "native-low"


def priority_classes(cluster) -> None:
    cluster.apply([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                    "value": value, "description": "end-to-end tests"} for name, value in ((HIGH, 1000), (LOW, 10))])


def podgroup(name: str, minimum: int, priority_class: str, key: str | None = None) -> dict:
    spec = {"schedulingPolicy": {"gang": {"minCount": minimum}}, "priorityClassName": priority_class}
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {"apiVersion": PODGROUP_API, "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def test_the_podgroups_priority_is_kept_with_workload_aware_preemption(preemption_cluster, preemption_ns):
    priority_classes(preemption_cluster)
    preemption_ns.apply(podgroup("pg-kept", 1, HIGH))
    kept = preemption_cluster.custom.get_namespaced_custom_object("scheduling.k8s.io", "v1alpha2", preemption_ns.name,
                                                                  "podgroups", "pg-kept")
    assert kept["spec"].get("priorityClassName") == HIGH and kept["spec"].get("priority") == 1000, kept["spec"]


def test_a_high_priority_native_podgroup_displaces_a_low_one(preemption_cluster, preemption_ns):
    """The priority is the PodGroups' only (the pods name no PriorityClass): one rack of two 8-GPU nodes holds
    the low gang; the high gang of two 8-GPU pods takes both nodes, the low gang's pods are evicted."""
    cluster, ns = preemption_cluster, preemption_ns
    priority_classes(cluster)
    racks(ns, 1, nodes=2)
    ns.apply(podgroup("pg-low", 2, LOW), *[member(f"low-{i}", "pg-low", gpus=8) for i in range(2)])
    low = cluster.wait_bound(ns.name, 2)
    nodes = {p.spec.node_name for p in low}
    ns.apply(podgroup("pg-high", 2, HIGH))
    time.sleep(1)
    ns.apply(*[member(f"high-{i}", "pg-high", gpus=8) for i in range(2)])
    deadline = time.monotonic() + 90
    while True:
        placed = {p.metadata.name: p.spec.node_name for p in bound(cluster, ns.name)
                  if p.metadata.name.startswith("high-") and not p.metadata.deletion_timestamp}
        if len(placed) == 2:
            break
        assert time.monotonic() < deadline, cluster.describe(ns.name)
        time.sleep(0.5)
    assert set(placed.values()) == nodes
    left = [p.metadata.name for p in cluster.pods(ns.name) if p.metadata.name.startswith("low-")
            and not p.metadata.deletion_timestamp]
    assert left == [], left
    plan = cluster.debug(f"plans/{ns.name}/pg-high")
    assert plan["priority"] == 1000 and plan["status"] == "bound", plan
    preempted = [e.message for e in cluster.core.list_namespaced_event(ns.name).items if e.reason == "Preempted"]
    assert len(preempted) == 2 and all(f"Preempted by gang {ns.name}/pg-high (priority 1000)" in m for m in preempted), \
        preempted                         # our filter, asked inside kube-scheduler's simulation, chose and evicted


def test_a_podgroup_with_a_topology_key_gets_no_workload_aware_preemption(preemption_cluster, preemption_ns):
    """What kube-scheduler does for a keyed PodGroup on a full cluster: its own filters leave no node, so the
    extender is never asked, and its workload-aware preemption refuses groups with scheduling constraints. The
    high gang waits (kube-scheduler says why on the PodGroup); the page lists it as refused by kube-scheduler."""
    cluster, ns = preemption_cluster, preemption_ns
    priority_classes(cluster)
    racks(ns, 1, nodes=2)
    ns.apply(podgroup("pg-low", 2, LOW, RACK), *[member(f"low-{i}", "pg-low", gpus=8) for i in range(2)])
    cluster.wait_bound(ns.name, 2)
    ns.apply(podgroup("pg-high", 2, HIGH, RACK))
    time.sleep(1)
    ns.apply(*[member(f"high-{i}", "pg-high", gpus=8) for i in range(2)])
    deadline, message = time.monotonic() + 30, ""
    while "not supported for pod groups with scheduling constraints" not in message:
        assert time.monotonic() < deadline, message
        time.sleep(0.5)
        group = cluster.custom.get_namespaced_custom_object("scheduling.k8s.io", "v1alpha2", ns.name, "podgroups",
                                                            "pg-high")
        message = " ".join(c.get("message", "") for c in (group.get("status") or {}).get("conditions") or [])
    assert not [p for p in bound(cluster, ns.name) if p.metadata.name.startswith("high-")]
    assert len([p for p in bound(cluster, ns.name) if p.metadata.name.startswith("low-")]) == 2
    unplanned = [e["gang"] for e in cluster.debug("plans")["unplanned"]]
    assert f"{ns.name}/pg-high" in unplanned, unplanned
