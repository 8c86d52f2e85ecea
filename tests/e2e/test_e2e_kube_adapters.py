"""The service's Kubernetes adapters against the real API server (issue 12: prefer the real control plane
where it can serve; tests/fakekube keeps only the faults it cannot produce on demand): KubeWriter's Binding
(with the placement annotations), conflicts, Eviction against a real PodDisruptionBudget, Events, and
leader election on a real Lease."""
from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client as k8s

from app.kube.client import KubeApi, KubeApiError, build_api_client
from app.kube.leader import LeaderElector
from app.kube.writer import EVENT_MESSAGE_LIMIT, KubeWriter
from app.ports import BindConflict, EvictionRefused

NOBODY = "e2e-nobody"          # a scheduler that does not exist: these pods stay unbound until the test binds them


@pytest.fixture
def api(cluster) -> KubeApi:
    return KubeApi(build_api_client(kubeconfig=str(cluster.plane.admin_kubeconfig)))


@pytest.fixture
def writer(api) -> KubeWriter:
    return KubeWriter(api, instance="replica-0")


def make_pod(cluster, namespace: str, name: str, labels: dict | None = None) -> k8s.V1Pod:
    return cluster.core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
        "spec": {"schedulerName": NOBODY, "containers": [{"name": "c", "image": "busybox:1.36"}]}})


def read(cluster, namespace: str, name: str) -> k8s.V1Pod | None:
    try:
        return cluster.core.read_namespaced_pod(name, namespace)
    except k8s.ApiException as err:
        if err.status == 404:
            return None
        raise


def wait(predicate, what: str, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return found


def test_bind_sets_the_node_the_annotations_and_the_scheduled_condition(cluster, ns, writer):
    pod = make_pod(cluster, ns.name, "worker-0")
    writer.bind(ns.name, "worker-0", pod.metadata.uid, "node-3", {"placement.tas-extender.io/rack": "r-3"})
    bound = read(cluster, ns.name, "worker-0")
    assert bound.spec.node_name == "node-3"
    assert bound.metadata.annotations["placement.tas-extender.io/rack"] == "r-3"     # copied by the API server
    assert [(c.type, c.status) for c in bound.status.conditions] == [("PodScheduled", "True")]


def test_bind_conflicts_name_the_node_and_change_nothing(cluster, ns, writer):
    uid = make_pod(cluster, ns.name, "worker-0").metadata.uid
    writer.bind(ns.name, "worker-0", uid, "node-3")
    with pytest.raises(BindConflict) as conflict:
        writer.bind(ns.name, "worker-0", uid, "node-5")
    assert conflict.value.node == "node-3"
    make_pod(cluster, ns.name, "worker-1")
    with pytest.raises(BindConflict) as stale:
        writer.bind(ns.name, "worker-1", "uid-of-a-deleted-pod", "node-3")
    assert stale.value.node is None and read(cluster, ns.name, "worker-1").spec.node_name is None
    with pytest.raises(KubeApiError) as missing:
        writer.bind(ns.name, "ghost", "uid", "node-3")
    assert missing.value.status == 404


def test_concurrent_binds_of_one_pod_have_exactly_one_winner(cluster, ns, writer):
    uid = make_pod(cluster, ns.name, "worker-0").metadata.uid
    outcomes: dict[str, object] = {}

    def bind(node: str) -> None:
        try:
            writer.bind(ns.name, "worker-0", uid, node)
            outcomes[node] = "bound"
        except BindConflict as conflict:
            outcomes[node] = conflict
    threads = [threading.Thread(target=bind, args=(f"node-{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [node for node, outcome in outcomes.items() if outcome == "bound"]
    assert len(winners) == 1 and len(outcomes) == 8
    assert read(cluster, ns.name, "worker-0").spec.node_name == winners[0]


def test_evict_deletes_gone_pods_are_no_error_and_a_disruption_budget_refuses(cluster, ns, writer):
    uid = make_pod(cluster, ns.name, "victim").metadata.uid
    writer.evict(ns.name, "victim", uid)
    wait(lambda: read(cluster, ns.name, "victim") is None, "the victim gone")
    writer.evict(ns.name, "never-existed")
    make_pod(cluster, ns.name, "reused-name")
    writer.evict(ns.name, "reused-name", uid="uid-of-the-old-pod")
    assert read(cluster, ns.name, "reused-name") is not None        # the new pod under that name stays

    protected = make_pod(cluster, ns.name, "protected", labels={"app": "protected"})
    writer.bind(ns.name, "protected", protected.metadata.uid, "node-1")
    cluster.core.patch_namespaced_pod_status("protected", ns.name, {"status": {
        "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})   # a kubelet would say so
    ns.apply({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-one"},
              "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "protected"}}}})
    with pytest.raises(EvictionRefused) as refused:
        writer.evict(ns.name, "protected", protected.metadata.uid)
    assert f"{ns.name}/protected" in str(refused.value)
    assert read(cluster, ns.name, "protected").metadata.deletion_timestamp is None


def test_events_are_recorded_counted_and_truncated(cluster, ns, writer):
    pod = make_pod(cluster, ns.name, "worker-0")
    involved = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "worker-0", "namespace": ns.name, "uid": pod.metadata.uid}}
    writer.event(involved, "GangUnschedulable", "needs one block", "Warning")
    for _ in range(3):
        writer.event(involved, "Waiting", "waits for 4 victims")
    writer.event(involved, "Long", "x" * 5000)
    found = {e.reason: e for e in cluster.core.list_namespaced_event(ns.name).items
             if e.source and e.source.component == "tas-extender"}
    assert found["GangUnschedulable"].type == "Warning" and found["GangUnschedulable"].count == 1
    assert found["GangUnschedulable"].involved_object.uid == pod.metadata.uid
    assert found["Waiting"].count == 3
    assert len(found["Long"].message) == EVENT_MESSAGE_LIMIT


# --- leader election on a real Lease -----------------------------------------------------------------------

FAST = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.1}


@pytest.fixture
def elector(cluster, ns):
    made: list[LeaderElector] = []

    def make(identity: str, **timing) -> LeaderElector:
        elector = LeaderElector(KubeApi(build_api_client(kubeconfig=str(cluster.plane.admin_kubeconfig))),
                                ns.name, "lease", identity, **{**FAST, **timing})
        made.append(elector)
        return elector
    yield make
    for each in made:
        each.stop(release=False)


def lease(cluster, namespace: str):
    return k8s.CoordinationV1Api(cluster.api).read_namespaced_lease("lease", namespace).spec


def test_one_leader_a_standby_takes_over_after_expiry_and_at_once_after_release(cluster, ns, elector):
    a, b = elector("a"), elector("b")
    a.start()
    wait(a.is_leader, "a leads")
    b.start()
    wait(lambda: b.attempts >= 5, "b tries for a while")
    assert a.is_leader() and not b.is_leader() and lease(cluster, ns.name).holder_identity == "a"
    a.stop(release=False)                                   # a crashes: the lease must expire first
    wait(b.is_leader, "b takes over after expiry")
    spec = lease(cluster, ns.name)
    assert spec.holder_identity == "b" and spec.lease_transitions == 1
    c = elector("c", lease_duration=30.0, renew_deadline=20.0)
    c.start()
    wait(lambda: c.attempts >= 3, "c is a follower")
    b.stop()                                                # graceful: released, c takes it at once
    wait(c.is_leader, "c takes the released lease", timeout=5)


def test_never_two_leaders_when_candidates_race(cluster, ns, elector):
    candidates = [elector(name) for name in "xyz"]
    for candidate in candidates:
        candidate.start()
    wait(lambda: any(c.is_leader() for c in candidates), "someone leads")
    for _ in range(200):
        assert sum(c.is_leader() for c in candidates) <= 1
        time.sleep(0.005)
    leader = next(c for c in candidates if c.is_leader())
    assert lease(cluster, ns.name).holder_identity == leader.identity
