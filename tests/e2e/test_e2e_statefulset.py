"""StatefulSets made by the real StatefulSet controller (in kube-controller-manager), which numbers its pods
with the `apps.kubernetes.io/pod-index` label. `Parallel` creates every pod at once; `OrderedReady` creates
the next pod only once the one before is Running and Ready, so its gang is planned at its first pod and each
later pod binds to the slot reserved for it (docs/service.md)."""
from __future__ import annotations

import time

from workloads import (BLOCK, ELSEWHERE, RACK, THREE_RACKS, assert_no_node_over, container, distinct, segments,
                       topology)

INDEX = "apps.kubernetes.io/pod-index"


def statefulset(name: str, replicas: int, policy: str, annotations: dict, template_annotations: dict) -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "annotations": annotations},
            "spec": {"replicas": replicas, "serviceName": name, "podManagementPolicy": policy,
                     "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name},
                                               "annotations": {"kai.scheduler/pod-index-label": INDEX,
                                                               **template_annotations}},
                                  "spec": {"schedulerName": "tas-scheduler", "containers": [container(8)]}}}}


def by_index(pods) -> list:
    return sorted(pods, key=lambda pod: int(pod.metadata.labels[INDEX]))


def test_parallel_statefulset_is_one_gang_with_its_segments_in_racks(cluster, ns):
    """8 pods of 8 GPUs in one block, pairs of 4 consecutive indexes on one rack each."""
    ns.add_nodes({**THREE_RACKS, **ELSEWHERE})
    ns.apply(statefulset("cache", 8, "Parallel", topology(required="block"), segments(4, "rack")))
    bound = by_index(cluster.wait_bound(ns.name, 8, "app=cache", timeout=90))
    assert len(distinct(cluster, bound, BLOCK)) == 1
    for segment in range(2):
        members = bound[segment * 4:segment * 4 + 4]
        assert len(distinct(cluster, members, RACK)) == 1, f"segment {segment} spans racks"
        assert {p.metadata.labels["kai.scheduler/segment-index"] for p in members} == {str(segment)}
    assert_no_node_over(cluster, 8)


def test_ordered_ready_statefulset_binds_each_pod_to_the_rack_reserved_at_its_first(cluster, ns):
    """4 pods of 8 GPUs in one rack; the controller makes pod n+1 only when pod n is Ready, which the test
    reports as the kubelet would."""
    ns.add_nodes({**THREE_RACKS, **ELSEWHERE})
    ns.apply(statefulset("ordered", 4, "OrderedReady", topology(required="rack"), {}))
    deadline = time.monotonic() + 120
    bound = []
    while len(bound) < 4:
        assert time.monotonic() < deadline, f"{len(bound)} of 4 pods bound"
        bound = cluster.wait_bound(ns.name, len(bound) + 1, "app=ordered", timeout=60)
        for pod in bound:
            mark_ready(cluster, ns.name, pod)
    assert [p.metadata.labels[INDEX] for p in by_index(bound)] == ["0", "1", "2", "3"]
    assert len(distinct(cluster, bound, RACK)) == 1
    assert len({p.spec.node_name for p in bound}) == 4


def mark_ready(cluster, namespace: str, pod) -> None:
    if pod.status.phase == "Running":
        return
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cluster.core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": {
        "phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now},
                                           {"type": "ContainersReady", "status": "True", "lastTransitionTime": now}]}})
