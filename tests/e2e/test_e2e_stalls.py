"""No gang waits for kube-scheduler's five-minute flush or for a reservation's TTL (issue 12: the stalled
gang round of bench_e2e): a refused pod is woken when its refusal runs out without any cluster event, and
a deleted workload gives its nodes back at once."""
from __future__ import annotations

import time

from workloads import (BLOCK, ELSEWHERE, GPU, RACK, assert_no_node_over, distinct, gated_gang, indexed_job,
                       plan_slots, release, topology)

WAKE_ANNOTATION = "tas-extender.io/wake"
TWO_RACKS_OF_FIVE = {f"{r}{n}": ("zone-a", "block-a", f"rack-{r}") for r in "xy" for n in range(5)}


def test_a_pod_refused_while_the_scheduler_lags_is_woken_and_replanned(cluster, ns):
    """kube-scheduler leaves a planned node out for a reason the plan could not foresee (a pod that takes
    its host port after the gang was planned). The slot's pod is refused while the lag grace runs (capacity freed moments ago looks the
    same), its siblings bind, and then nothing in the cluster changes. The service wakes the pod when the
    grace is over; its next filter call re-plans the slot on the spare node of its rack. Without the
    wake-up it waits for kube-scheduler's five-minute flush."""
    ns.add_nodes({**TWO_RACKS_OF_FIVE, **ELSEWHERE})
    held = gated_gang(cluster, ns, "ported", range(4, 8), host_port=9000)
    target = take_port_of_worker_6_then_release(cluster, ns, held)

    bound = cluster.wait_bound(ns.name, 9, timeout=75)
    gang = [p for p in bound if p.metadata.name != "port-holder"]
    moved = next(p for p in gang if p.metadata.name.endswith("-worker-6"))
    assert moved.spec.node_name != target
    assert WAKE_ANNOTATION in (moved.metadata.annotations or {})
    assert len(distinct(cluster, gang, BLOCK)) == 1
    assert len(distinct(cluster, [p for p in gang if p.metadata.name in held], RACK)) == 1
    assert_no_node_over(cluster, 8)


def test_the_next_job_gets_the_nodes_of_a_deleted_job_at_once(cluster, ns):
    """A deleted bound pod's slot is held for its replacement, but a deleted Job sends none: its
    reservations go with it, and the next job binds without waiting for their TTL."""
    ns.add_nodes({f"n{i}": ("zone-a", "block-a", "rack-a") for i in range(4)})
    ns.apply(indexed_job("first", 4, 8, topology(required="rack")))
    cluster.wait_bound(ns.name, 4, "job-name=first")
    cluster.plane.kubectl("-n", ns.name, "delete", "job", "first", "--wait=false")
    ns.apply(indexed_job("second", 4, 8, topology(required="rack")))
    bound = cluster.wait_bound(ns.name, 4, "job-name=second", timeout=60)
    assert len(distinct(cluster, bound, RACK)) == 1
    assert_no_node_over(cluster, 8)


def test_a_gang_left_below_its_minimum_is_evicted_after_its_staleness_grace_period(cluster, ns):
    """KAI's stale gang eviction: a PodGroup of bare pods (nobody replaces a lost one) runs below its
    minMember once two of its four pods are gone. After the PodGroup's stalenessGracePeriod the other two
    are evicted, so they do not hold their GPUs for a gang that cannot run."""
    ns.add_nodes({f"n{i}": ("zone-a", "block-a", "rack-a") for i in range(4)})
    ns.apply({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "pg-s"},
              "spec": {"minMember": 4, "stalenessGracePeriod": "2s",
                       "topologyConstraint": {"topology": "e2e", "requiredTopologyLevel": "rack"}}})
    for i in range(4):
        ns.apply({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": f"s{i}", "annotations": {"pod-group-name": "pg-s"}},
                  "spec": {"schedulerName": "tas-scheduler", "containers": [
                      {"name": "main", "image": "busybox", "resources": {"limits": {GPU: "8"}}}]}})
    cluster.wait_bound(ns.name, 4)
    for i in range(2):
        cluster.core.delete_namespaced_pod(f"s{i}", ns.name)
    deadline = time.monotonic() + 30
    while cluster.pods(ns.name) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cluster.pods(ns.name) == [], "the gang's last two pods still hold their nodes"
    events = [e for e in cluster.core.list_namespaced_event(ns.name).items if e.reason == "StaleGangEvicted"]
    assert [e.involved_object.name for e in events] == ["pg-s"]
    assert "2 of its 4 pods bound" in events[0].message


def test_a_gang_that_kube_scheduler_leaves_half_bound_is_evicted_after_its_grace_period(cluster, ns):
    """The case stale gang eviction is for: a pod takes a planned node's host port after the gang was planned
    (nothing the plan could foresee), and no other node of the gang's block can take that worker. Three of
    the four last workers bind, the fourth is refused for good: seven of eight pods hold their GPUs for a
    job that cannot start. After the TFJob's kai.scheduler/staleness-grace-period the seven are evicted."""
    ns.add_nodes({**{f"{r}{n}": ("zone-a", "block-a", f"rack-{r}") for r in "xy" for n in range(4)}, **ELSEWHERE})
    held = gated_gang(cluster, ns, "stuck", range(4, 8), host_port=9000,
                      annotations={"kai.scheduler/staleness-grace-period": "3s"})
    take_port_of_worker_6_then_release(cluster, ns, held)

    deadline = time.monotonic() + 60
    gang = "training.kubeflow.org/replica-type"
    while [p for p in cluster.pods(ns.name, gang) if p.spec.node_name] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [p.metadata.name for p in cluster.pods(ns.name, gang) if p.spec.node_name]
    events = [e for e in cluster.core.list_namespaced_event(ns.name).items if e.reason == "StaleGangEvicted"]
    assert [e.involved_object.kind for e in events] == ["TFJob"]
    assert "of its 8 pods bound" in events[0].message


def take_port_of_worker_6_then_release(cluster, ns, held: list[str]) -> str:
    """Once the gang's first four workers are bound, a default-scheduler pod takes host port 9000 on the
    node planned for worker-6 (nothing the plan could foresee); then the held workers are released. The
    node taken."""
    cluster.wait_bound(ns.name, 4)
    target = plan_slots(cluster, ns.name)["worker-6"]
    ns.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "port-holder"},
              "spec": {"schedulerName": "default-scheduler", "nodeSelector": {"kubernetes.io/hostname": target},
                       "tolerations": [{"key": GPU, "operator": "Exists"}],
                       "containers": [{"name": "main", "image": "busybox:1.36",
                                       "ports": [{"containerPort": 9000, "hostPort": 9000}]}]}})
    cluster.wait_bound(ns.name, 1, "!training.kubeflow.org/replica-type")
    release(cluster, ns, held)
    return target
