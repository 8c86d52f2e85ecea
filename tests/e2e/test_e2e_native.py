"""Native workload scheduling on (the v1.36 gates, scheduling.k8s.io/v1alpha2 served): native PodGroups are our
gangs, an Indexed Job that the Job controller puts in a PodGroup of its own keeps our segments, and no filter
call is held. The rest of the suite runs on a control plane with the gates off (or on, with TAS_E2E_GATES=on)."""
from __future__ import annotations

import time

from workloads import BLOCK, RACK, container, distinct, held_over, indexed_job, segments, topology

PODGROUP_API = "scheduling.k8s.io/v1alpha2"


def podgroup(name: str, minimum: int, key: str | None) -> dict:
    spec = {"schedulingPolicy": {"gang": {"minCount": minimum}}}
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {"apiVersion": PODGROUP_API, "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def member(name: str, group: str, gpus: int = 4) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": "tas-scheduler", "schedulingGroup": {"podGroupName": group},
                     "containers": [container(gpus)]}}


def racks(ns, count: int, nodes: int = 4, blocks: int = 1) -> None:
    """`blocks` blocks of `count` racks of `nodes` nodes (8 GPUs each)."""
    ns.add_nodes({f"b{b}r{r}n{n}": ("zone-a", f"block-{b}", f"rack-{b}{r}")
                  for b in range(blocks) for r in range(count) for n in range(nodes)})


def bound(cluster, namespace: str) -> list:
    return [p for p in cluster.pods(namespace) if p.spec.node_name]


def test_podgroups_are_served_on_this_cluster(native_cluster):
    served = native_cluster.plane.kubectl("api-resources", "--api-group=scheduling.k8s.io", "-o", "name")
    assert "podgroups.scheduling.k8s.io" in served and "workloads.scheduling.k8s.io" in served


def test_a_native_podgroup_of_8_on_the_rack_key_waits_for_its_8th_pod_then_lands_in_one_rack(native_cluster, native_ns):
    cluster, ns = native_cluster, native_ns
    racks(ns, 3)
    ns.apply(podgroup("pg-rack", 8, RACK))
    for i in range(7):
        ns.apply(member(f"p{i}", "pg-rack"))
        time.sleep(0.3)
    time.sleep(1.5)
    assert not bound(cluster, ns.name), "a pod bound before the 8th member existed"
    ns.apply(member("p7", "pg-rack"))
    pods = cluster.wait_bound(ns.name, 8)
    assert len(distinct(cluster, pods, RACK)) == 1
    plans = [p for p in cluster.debug("plans")["plans"] if p["gang"].startswith(ns.name + "/")]
    assert [p["gang"] for p in plans] == [f"{ns.name}/pg-rack"]
    assert len(cluster.debug(f"plans/{ns.name}/pg-rack")["slots"]) == 8


def test_a_native_podgroup_of_16_on_the_block_key_lands_in_one_block(native_cluster, native_ns):
    cluster, ns = native_cluster, native_ns
    racks(ns, 2, blocks=2)                    # each block: 2 racks of 4 nodes, 64 GPUs: 16 pods of 4
    ns.apply(podgroup("pg-block", 16, BLOCK), *[member(f"p{i}", "pg-block") for i in range(16)])
    pods = cluster.wait_bound(ns.name, 16)
    assert len(distinct(cluster, pods, BLOCK)) == 1


def test_a_podgroup_of_min_count_4_with_3_pods_waits_and_binds_when_the_4th_arrives(native_cluster, native_ns):
    cluster, ns = native_cluster, native_ns
    racks(ns, 2)
    ns.apply(podgroup("pg-four", 4, RACK), *[member(f"p{i}", "pg-four") for i in range(3)])
    time.sleep(3)
    assert not bound(cluster, ns.name)
    ns.apply(member("p3", "pg-four"))
    pods = cluster.wait_bound(ns.name, 4)
    assert len(distinct(cluster, pods, RACK)) == 1


def test_an_indexed_job_in_the_job_controllers_podgroup_keeps_our_segments(native_cluster, native_ns):
    cluster, ns = native_cluster, native_ns
    racks(ns, 4, blocks=1)
    ns.apply(indexed_job("train", 8, 4, topology(required="block"), segments(4, "rack")))
    pods = cluster.wait_bound(ns.name, 8, "job-name=train")
    groups = {p.spec.scheduling_group.pod_group_name for p in pods if p.spec.scheduling_group}
    assert len(groups) == 1, f"the Job's pods are in one native PodGroup: {groups}"
    for segment in range(2):
        members = [p for p in pods if int(p.metadata.labels["batch.kubernetes.io/job-completion-index"]) // 4 == segment]
        assert len(distinct(cluster, members, RACK)) == 1, f"segment {segment} spans racks"
    plans = [p for p in cluster.debug("plans")["plans"] if p["gang"].startswith(ns.name + "/")]
    assert len(plans) == 1, "the Job and its PodGroup are one gang"


def test_bad_native_objects_are_warned_refused_and_shown(native_cluster, native_ns):
    cluster, ns = native_cluster, native_ns
    racks(ns, 1)
    ns.apply(podgroup("pg-odd", 1, "example.com/no-such-level"))
    time.sleep(1)
    ns.apply(member("odd", "pg-odd"), member("lost", "pg-none"))
    time.sleep(3)
    assert not bound(cluster, ns.name)
    native = cluster.debug("plans")["native"]
    assert any(p["podgroup"] == f"{ns.name}/pg-odd" and "no-such-level" in p["problem"] for p in native)
    assert any(p["podgroup"] == f"{ns.name}/pg-none" and "does not exist" in p["problem"] for p in native)


def test_a_gang_of_ours_waits_at_kube_schedulers_own_gate(native_cluster, native_ns):
    """A KAI PodGroup's pods, created one by one: the webhook puts them in a native PodGroup of the same name
    (minCount = minMember) that the service creates, so kube-scheduler holds them at PreEnqueue: our filter
    never sees (nor refuses, nor holds) a pod of the incomplete gang."""
    cluster, ns = native_cluster, native_ns
    racks(ns, 2)
    ns.apply({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "pg-x"},
              "spec": {"minMember": 4, "topologyConstraint": {"topology": "e2e", "requiredTopologyLevel": "rack"}}})
    time.sleep(1)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "spec": {"schedulerName": "tas-scheduler", "containers": [container(4)]}}
    for i in range(3):
        ns.apply({**pod, "metadata": {"name": f"p{i}", "annotations": {"pod-group-name": "pg-x"}}})
        time.sleep(1)
    assert not bound(cluster, ns.name)
    assert {p.spec.scheduling_group.pod_group_name for p in cluster.pods(ns.name)} == {"pg-x"}
    gate = cluster.custom.get_namespaced_custom_object("scheduling.k8s.io", "v1alpha2", ns.name, "podgroups", "pg-x")
    assert gate["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert gate["metadata"]["ownerReferences"][0]["kind"] == "PodGroup"
    ns.apply({**pod, "metadata": {"name": "p3", "annotations": {"pod-group-name": "pg-x"}}})
    pods = cluster.wait_bound(ns.name, 4)
    assert len(distinct(cluster, pods, RACK)) == 1
    refusals = [e.message for e in cluster.core.list_namespaced_event(ns.name).items
                if e.reason == "FailedScheduling" and "waiting for" in e.message and "more pods of gang" in e.message]
    assert refusals == [], "our filter refused pods of the incomplete gang: kube-scheduler's gate did not hold them"


def test_no_filter_call_was_held_over_50_ms(native_cluster):
    """Runs last in this file: the held-call histogram of the service covers every test above."""
    metrics = native_cluster.metrics()
    over = held_over(metrics, 0.05)
    assert over == 0, f"{over} filter calls held over 50 ms"
