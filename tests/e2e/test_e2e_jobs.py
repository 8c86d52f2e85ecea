"""Gangs made by the real Job controller, and a PodGroup whose pods trickle in."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from controlplane import gates_from_env
from workloads import BLOCK, RACK, ZONE, distinct, held_over, indexed_job, segments, topology

TWO_ZONES = {f"{z}{r}{n}": (f"zone-{z}", f"block-{z}", f"rack-{z}{r}") for z in "ab" for r in "12" for n in "1234"}


def test_indexed_job_from_the_job_controller_is_one_gang_in_racks(cluster, ns):
    """The Job controller creates pods in slow-start batches (1, 2, 4, ...); the gang is never split."""
    ns.add_nodes(TWO_ZONES)
    ns.apply(indexed_job("train", 8, 4, topology(required="zone"), segments(4, "rack")))
    bound = cluster.wait_bound(ns.name, 8, "job-name=train")
    assert len(distinct(cluster, bound, ZONE)) == 1
    assert len(distinct(cluster, bound, BLOCK)) == 1
    for segment in range(2):
        members = [p for p in bound
                   if int(p.metadata.labels["batch.kubernetes.io/job-completion-index"]) // 4 == segment]
        assert len(members) == 4
        assert len(distinct(cluster, members, RACK)) == 1, f"segment {segment} spans racks"
    for pod in bound:
        env = {e.name: e.value for c in pod.spec.containers for e in (c.env or [])}
        index = int(pod.metadata.labels["batch.kubernetes.io/job-completion-index"])
        assert env["KAI_SEGMENT_INDEX"] == str(index // 4)
        assert env["KAI_NUM_SEGMENTS"] == "2"
        # ExtendedResourceToleration added the GPU toleration; the plan must have used the admitted pod.
        assert any(t.key == "nvidia.com/gpu" for t in pod.spec.tolerations)
    # the controller's batches come moments apart. Gates on: the Job controller's own PodGroup holds them at
    # kube-scheduler's gate, so no refusal; gates off: the first pods are refused (held 5 ms at most) and
    # bind when retried. Never a filter call held over 50 ms.
    if cluster.plane.gates:
        refusals = [e.message for e in cluster.core.list_namespaced_event(ns.name).items
                    if e.reason == "FailedScheduling"]
        assert refusals == []
    assert held_over(cluster.metrics(), 0.05) == 0


def test_podgroup_pods_created_one_by_one_wait_for_min_member(cluster, ns):
    ns.add_nodes({f"n{i}": ("zone-a", "block-a", f"rack-a{i // 4}") for i in range(8)})
    ns.apply({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "pg-x"},
              "spec": {"minMember": 4, "topologyConstraint": {
                  "topology": "e2e", "requiredTopologyLevel": "rack"}}})
    pod = {"apiVersion": "v1", "kind": "Pod",
           "spec": {"schedulerName": "tas-scheduler", "containers": [
               {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    for i in range(3):
        ns.apply({**pod, "metadata": {"name": f"p{i}", "annotations": {"pod-group-name": "pg-x"}}})
        time.sleep(1.5)
    assert not [p for p in cluster.pods(ns.name) if p.spec.node_name], "a pod bound before minMember existed"
    if not cluster.plane.gates:         # gates on: kube-scheduler's own gate holds them (a native PodGroup)
        # refused as unresolvable: kube-scheduler runs no preemption dry run for pods no eviction can help
        messages = [e.message for e in cluster.core.list_namespaced_event(ns.name).items
                    if e.reason == "FailedScheduling"]
        assert any("waiting for" in m and "Preemption is not helpful for scheduling" in m for m in messages), messages
    ns.apply({**pod, "metadata": {"name": "p3", "annotations": {"pod-group-name": "pg-x"}}})
    bound = cluster.wait_bound(ns.name, 4)
    assert len(distinct(cluster, bound, RACK)) == 1


def test_a_gang_whose_last_pods_come_moments_after_its_first_never_holds_kube_schedulers_loop(cluster, ns):
    """An idle kube-scheduler tries the first pod before its siblings exist. With the native gates on, the
    webhook put the pods in a native PodGroup (minCount 4) and kube-scheduler itself waits: no refusal. With
    them off, the first pod's filter call is held at most a few ms (then refused into kube-scheduler's
    backoff, and the gang binds when it is retried). Either way no call holds the loop over 50 ms."""
    ns.add_nodes({f"n{i}": ("zone-a", "block-a", f"rack-a{i // 4}") for i in range(8)})
    ns.apply({"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "pg-y"},
              "spec": {"minMember": 4, "topologyConstraint": {"topology": "e2e", "requiredTopologyLevel": "rack"}}})
    pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "annotations": {"pod-group-name": "pg-y"}},
             "spec": {"schedulerName": "tas-scheduler", "containers": [
                 {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
            for i in range(4)]
    def create(pod):                           # straight through the client: kubectl would take 0.1-0.2 s a call
        cluster.core.create_namespaced_pod(ns.name, pod)
    create(pods[0])
    time.sleep(0.03)                           # long enough for kube-scheduler to take p0 alone
    with ThreadPoolExecutor(3) as threads:
        list(threads.map(create, pods[1:]))
    bound = cluster.wait_bound(ns.name, 4)
    assert len(distinct(cluster, bound, RACK)) == 1
    if cluster.plane.gates:
        refusals = [e.message for e in cluster.core.list_namespaced_event(ns.name).items if e.reason == "FailedScheduling"]
        assert refusals == []
    assert held_over(cluster.metrics(), 0.05) == 0


def test_an_indexed_job_with_more_completions_than_parallelism_runs_wave_after_wave(cluster, ns):
    """completions 8, parallelism 4: the Job controller runs indexes 0-3, and 4-7 once those succeed
    (reported here as the kubelet would). Each wave of 4 pods of 8 GPUs lands in one rack."""
    ns.add_nodes({f"n{i}": ("zone-a", "block-a", f"rack-a{i // 4}") for i in range(8)})
    job = indexed_job("waves", 4, 8, topology(required="rack"))
    job["spec"]["completions"] = 8
    ns.apply(job)
    first = cluster.wait_bound(ns.name, 4, "job-name=waves")
    assert len(distinct(cluster, first, RACK)) == 1
    for pod in first:
        cluster.core.patch_namespaced_pod_status(pod.metadata.name, ns.name, {"status": {"phase": "Succeeded"}})
    deadline = time.monotonic() + 90
    while True:
        second = [p for p in cluster.pods(ns.name, "job-name=waves") if p.spec.node_name
                  and int(p.metadata.labels["batch.kubernetes.io/job-completion-index"]) >= 4]
        if len(second) == 4:
            break
        assert time.monotonic() < deadline, cluster.describe(ns.name)
        time.sleep(0.5)
    assert len(distinct(cluster, second, RACK)) == 1


INDEX = "batch.kubernetes.io/job-completion-index"


def gang_beside_a_tight_rack(cluster, ns, name: str) -> list:
    """A gang of 4 pods of 4 GPUs required in one rack, bound two per node in rack a (4 nodes). Rack b is
    one node with 4 of its 8 GPUs taken by another pod: the tightest room for a lone pod of 4 GPUs."""
    ns.add_nodes({f"n{i}": ("zone-a", "block-a", "rack-a") for i in range(4)})
    ns.add_nodes({"m0": ("zone-a", "block-a", "rack-b")})
    ns.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "filler"},
              "spec": {"schedulerName": "default-scheduler", "nodeSelector": {"kubernetes.io/hostname": f"{ns.name}-m0"},
                       "tolerations": [{"operator": "Exists"}],
                       "containers": [{"name": "main", "image": "busybox:1.36",
                                       "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}})
    cluster.wait_bound(ns.name, 1)
    job = indexed_job(name, 4, 4, topology(required="rack"))
    job["spec"]["backoffLimit"] = 2
    ns.apply(job)
    first = cluster.wait_bound(ns.name, 4, f"job-name={name}")
    assert distinct(cluster, first, RACK) == {f"{ns.name}-rack-a"}
    return first


def replacement_of(cluster, ns, gone) -> list:
    """The bound pod the Job controller made for the index of `gone`."""
    deadline = time.monotonic() + 90
    while True:
        new = [p for p in cluster.pods(ns.name, f"job-name={gone.metadata.labels['job-name']}")
               if p.metadata.name != gone.metadata.name and p.spec.node_name
               and p.metadata.labels[INDEX] == gone.metadata.labels[INDEX]]
        if new:
            return new
        assert time.monotonic() < deadline, cluster.describe(ns.name)
        time.sleep(0.5)


def test_a_failed_pod_of_a_running_gang_is_replaced_inside_the_gangs_rack(cluster, ns):
    """Index 2 fails; the Job controller makes a new pod for that index (the failed one stays, Failed, as
    history). The replacement rejoins its gang in rack a, not the tighter rack b."""
    first = gang_beside_a_tight_rack(cluster, ns, "retry")
    failed = next(p for p in first if p.metadata.labels[INDEX] == "2")
    cluster.core.patch_namespaced_pod_status(failed.metadata.name, ns.name, {"status": {"phase": "Failed"}})
    assert distinct(cluster, replacement_of(cluster, ns, failed), RACK) == {f"{ns.name}-rack-a"}


def test_a_suspended_job_gives_its_nodes_to_the_next_job_at_once(cluster, ns):
    """Kueue preempts and requeues a Job by suspending it: the Job controller deletes its pods and makes
    no replacements. Its reservations go with the pods, and the next job binds without waiting for the
    reservations' TTL (five minutes)."""
    ns.add_nodes({f"n{i}": ("zone-a", "block-a", "rack-a") for i in range(4)})
    ns.apply(indexed_job("first", 4, 8, topology(required="rack")))
    cluster.wait_bound(ns.name, 4, "job-name=first")
    cluster.plane.kubectl("-n", ns.name, "patch", "job", "first", "--type=merge", "-p", '{"spec":{"suspend":true}}')
    ns.apply(indexed_job("second", 4, 8, topology(required="rack")))
    bound = cluster.wait_bound(ns.name, 4, "job-name=second", timeout=45)
    assert len(distinct(cluster, bound, RACK)) == 1


@pytest.mark.skipif(gates_from_env(), reason="with WorkloadWithJob the API server forbids changing the parallelism of "
                                            "a Job in a gang PodGroup (the Job controller made one)")
def test_an_indexed_job_scaled_down_gives_the_nodes_of_its_removed_indexes_to_the_next_job(cluster, ns):
    """An elastic Indexed Job (completions and parallelism changed together) scaled from 8 to 4: the Job
    controller deletes indexes 4-7 and makes no replacements. Their slots are not held for the TTL."""
    ns.add_nodes({f"n{i}": ("zone-a", "block-a", "rack-a") for i in range(8)})
    ns.apply(indexed_job("elastic", 8, 8, topology(required="rack")))
    cluster.wait_bound(ns.name, 8, "job-name=elastic")
    cluster.plane.kubectl("-n", ns.name, "patch", "job", "elastic", "--type=merge", "-p",
                          '{"spec":{"parallelism":4,"completions":4}}')
    ns.apply(indexed_job("next", 4, 8, topology(required="rack")))
    bound = cluster.wait_bound(ns.name, 4, "job-name=next", timeout=45)
    assert len(distinct(cluster, bound, RACK)) == 1


def test_a_job_created_suspended_and_resumed_is_planned_when_its_pods_come(cluster, ns):
    """Kueue creates Jobs suspended and resumes them on admission: nothing is planned before, and the pods
    the Job controller then makes land as one gang."""
    ns.add_nodes({f"n{i}": ("zone-a", "block-a", f"rack-a{i // 4}") for i in range(8)})
    job = indexed_job("queued", 4, 8, topology(required="rack"))
    job["spec"]["suspend"] = True
    ns.apply(job)
    time.sleep(2)
    assert cluster.pods(ns.name, "job-name=queued") == []
    assert not [p for p in cluster.debug("plans")["plans"] if p["gang"].startswith(f"{ns.name}/")]
    cluster.plane.kubectl("-n", ns.name, "patch", "job", "queued", "--type=merge", "-p", '{"spec":{"suspend":false}}')
    bound = cluster.wait_bound(ns.name, 4, "job-name=queued")
    assert len(distinct(cluster, bound, RACK)) == 1


def test_a_drained_node_sends_its_gang_pod_to_a_spare_node_of_the_gang_rack(cluster, ns):
    """`kubectl drain` cordons a node and evicts its pods: the replacement of the evicted gang pod stays in
    rack a, on another node, not in the tighter rack b."""
    victim = gang_beside_a_tight_rack(cluster, ns, "drained")[0]
    cluster.core.patch_node(victim.spec.node_name, {"spec": {"unschedulable": True}})
    cluster.core.create_namespaced_pod_eviction(victim.metadata.name, ns.name, {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim.metadata.name}})
    new = replacement_of(cluster, ns, victim)
    assert distinct(cluster, new, RACK) == {f"{ns.name}-rack-a"}
    assert new[0].spec.node_name != victim.spec.node_name
