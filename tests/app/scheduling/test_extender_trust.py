"""The verbs trust the service's copy of a pod, never the request body (issue 33, item 2).

Whoever can reach the verbs can send any body: a forged priority, owner, labels or requests, or a bind of
another tenant's pod. Each rule here is one such attack, refused; the standalone service's loaded and
applied objects stand for the watch of a cluster."""
from __future__ import annotations

import copy

from fastapi.testclient import TestClient

from app.server import create_app
from app.settings import Settings
from app.state import POD_KIND
from test_preemption_service import RecordingWriter, fabric_nodes, job, running
from app.scheduling.trusted import UNKNOWN_POD_RETRY
from service_helpers import (Clock, engine, filter_, indexed_job, job_pods, make_client, node_names, plain_pod, service,
                             watch)

NOT_KNOWN = "is not known to the extender yet"


def post_filter(client: TestClient, pod: dict) -> dict:
    """A filter call with exactly this body: nothing is delivered to the service first."""
    body = {"Pod": pod, "Nodes": None, "NodeNames": node_names(client)}
    return client.post("/scheduler/filter", json=body).json()


def post_bind(client: TestClient, namespace: str, name: str, uid: str, node: str) -> str:
    body = {"PodName": name, "PodNamespace": namespace, "PodUID": uid, "Node": node}
    return client.post("/scheduler/bind", json=body).json()["Error"]


def post_preempt(client: TestClient, pod: dict, victims: dict[str, list[str]]) -> dict:
    body = {"Pod": pod, "NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": 0} for node, uids in victims.items()}}
    answer = client.post("/scheduler/preempt", json=body).json()["NodeNameToMetaVictims"]
    return {node: [p["UID"] for p in v["Pods"]] for node, v in answer.items()}


# --- a pod the service has not seen ----------------------------------------------------------------------
def test_filter_refuses_a_pod_the_service_has_not_seen_and_stores_nothing():
    client = make_client()
    state = service(client)
    added = state.pods_added
    answer = post_filter(client, plain_pod("stranger"))
    assert answer["NodeNames"] == [] and answer["FailedNodes"] == {}
    reasons = set(answer["FailedAndUnresolvableNodes"].values())       # no eviction makes the watch faster
    assert len(reasons) == 1 and NOT_KNOWN in reasons.pop()          # said once, for every node
    assert state.find_pod("default", "stranger") is None and state.pods_added == added
    assert state.objects.get("Pod", "default", "stranger") is None


def test_a_gang_pod_the_service_has_not_seen_plans_nothing():
    job_object = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job_object)
    answer = post_filter(client, job_pods(job_object)[0])
    assert answer["NodeNames"] == [] and NOT_KNOWN in next(iter(answer["FailedAndUnresolvableNodes"].values()))
    assert list(service(client).plans) == [] and service(client).plans.reservation_count() == 0


def test_an_unseen_pod_is_passed_once_the_watch_brings_it():
    client = make_client()
    pod = plain_pod("late")
    assert post_filter(client, pod)["NodeNames"] == []
    watch(client, pod)
    assert post_filter(client, pod)["NodeNames"] == node_names(client)


def test_filter_refuses_a_body_whose_uid_is_not_the_watched_pods():
    client = make_client()
    watch(client, plain_pod("web"))
    forged = plain_pod("web")
    forged["metadata"]["uid"] = "uid-of-another-pod"
    answer = post_filter(client, forged)
    assert answer["NodeNames"] == []
    assert "has UID uid-web in the cluster, not uid-of-another-pod" in next(iter(
        answer["FailedAndUnresolvableNodes"].values()))


def test_preempt_offers_no_victims_for_a_pod_the_service_has_not_seen():
    client = make_client()
    assert post_preempt(client, plain_pod("stranger"), {"node-01": ["uid-x"]}) == {}


def test_preempt_of_a_pod_the_service_has_not_seen_wakes_it_again_shortly():
    """On a full cluster kube-scheduler's own filters pass no node and its preempt call is the first the
    service hears of the pod; refused there as unknown, it must be woken like a filter refusal, or it waits
    in kube-scheduler's unschedulable queue for minutes (an e2e preemption test stalled so)."""
    clock = Clock()
    client = make_client(clock=clock)
    post_preempt(client, plain_pod("stranger"), {"node-01": ["uid-x"]})
    wakeups = engine(client).wakeups
    assert wakeups.pending() == 1
    assert [(w.namespace, w.name) for w in wakeups.take_due(clock() + UNKNOWN_POD_RETRY + 1)] == [
        ("default", "stranger")]


def test_prioritize_scores_an_unseen_pod_neutrally_and_stores_nothing():
    client = make_client()
    body = {"Pod": plain_pod("stranger"), "Nodes": None, "NodeNames": ["node-01", "node-02"]}
    scores = client.post("/scheduler/prioritize", json=body).json()
    assert [s["Score"] for s in scores] == [5, 5]
    assert service(client).find_pod("default", "stranger") is None


# --- a forged body of a pod the service knows ------------------------------------------------------------
def test_filter_decides_from_the_watched_pod_not_a_forged_owner():
    """The watched pod is a plain pod; the body claims it is pod 0 of a gang: it stays a plain pod."""
    job_object = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job_object)
    watch(client, plain_pod("web", gpus=4, namespace="team-a"))
    forged = copy.deepcopy(job_pods(job_object)[0])
    forged["metadata"].update(name="web", uid="uid-web")
    answer = post_filter(client, forged)
    assert answer["NodeNames"] == node_names(client)          # every node: a plain pod
    assert list(service(client).plans) == []                  # no gang was planned for it


def test_prioritize_scores_from_the_watched_pod_not_a_forged_owner():
    job_object = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job_object)
    planned = filter_(client, job_pods(job_object)[0])["NodeNames"][0]
    watch(client, plain_pod("web", gpus=4, namespace="team-a"))
    forged = copy.deepcopy(job_pods(job_object)[0])
    forged["metadata"].update(name="web", uid="uid-web")
    def scores(pod: dict) -> dict[str, int]:
        body = {"Pod": pod, "Nodes": None, "NodeNames": [planned, "node-30"]}
        return {s["Host"]: s["Score"] for s in client.post("/scheduler/prioritize", json=body).json()}
    honest = scores(plain_pod("web", gpus=4, namespace="team-a"))
    assert scores(forged) == honest                            # a plain pod's scores: it belongs to no gang
    assert honest[planned] != 10                               # not the planned slot's node score


def forged_priority_client() -> tuple[TestClient, RecordingWriter, list[dict]]:
    """Twelve 8-GPU nodes, eight of them running two priority-0 jobs of namespace research; namespace attacker
    has a PodGroup of eight priority-0 pods of 8 GPUs: it fits only by evicting, which equal priority may not."""
    job_a, job_b = job("job-a", "research", 4, priority=0), job("job-b", "research", 4, priority=0)
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "pg-a", "namespace": "attacker", "uid": "uid-pg-a", "resourceVersion": "1"},
             "spec": {"minMember": 8}}
    members = [{"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"pg-a-{i}", "namespace": "attacker", "uid": f"uid-pg-a-{i}",
                             "resourceVersion": "1", "labels": {"scheduling.x-k8s.io/pod-group": "pg-a"}},
                "spec": {"schedulerName": "tas-scheduler", "priority": 0, "containers": [{
                    "name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
                "status": {"phase": "Pending"}} for i in range(8)]
    objects = fabric_nodes() + [job_a, job_b, group] + running(job_a, 0) + running(job_b, 4) + members
    app = create_app(Settings(), objects=copy.deepcopy(objects), clock=Clock(), writer=RecordingWriter)
    return TestClient(app), app.state.engine.writer, members


def forged(member: dict) -> dict:
    body = copy.deepcopy(member)
    body["spec"]["priority"] = 1_000_000
    return body


def test_a_forged_priority_in_filter_evicts_nothing():
    client, writer, members = forged_priority_client()
    answer = post_filter(client, forged(members[0]))
    assert answer["NodeNames"] == []
    assert writer.evictions == []
    assert not [e for e in writer.events if e["reason"] in ("Preempting", "Preempted")]


def test_a_forged_priority_in_preempt_evicts_nothing():
    client, writer, members = forged_priority_client()
    kept = post_preempt(client, forged(members[0]), {"node-04": ["uid-job-b-0"]})
    assert kept == {} and writer.evictions == []


def test_the_watched_priority_does_preempt():
    """The control: the same gang at a priority the API server holds does evict (the rule above is not
    passing only because preemption is broken)."""
    client, writer, members = forged_priority_client()
    state = service(client)
    for member in members:
        state.apply(POD_KIND, "MODIFIED", forged(member))
    post_filter(client, members[0])
    assert len(writer.evictions) == 4


# --- bind ------------------------------------------------------------------------------------------------
def test_bind_refuses_a_pod_the_service_has_not_seen():
    client = make_client()
    error = post_bind(client, "default", "ghost", "uid-ghost", "node-01")
    assert error == "refusing to bind pod default/ghost: it is not in the extender's watched view of the cluster"
    assert service(client).find_pod("default", "ghost") is None


def test_bind_refuses_a_pod_of_another_scheduler_in_another_namespace():
    client = make_client()
    pod = plain_pod("tenant-web", namespace="tenant-b")
    pod["spec"]["schedulerName"] = "default-scheduler"
    service(client).apply(POD_KIND, "ADDED", pod)
    error = post_bind(client, "tenant-b", "tenant-web", "uid-tenant-web", "node-01")
    assert error == ("refusing to bind pod tenant-b/tenant-web: its spec.schedulerName is default-scheduler, and "
                     "this extender binds only pods of tas-scheduler (--scheduler-name)")
    assert not service(client).find_pod("tenant-b", "tenant-web")["spec"].get("nodeName")


def test_a_pod_without_a_scheduler_name_is_the_default_schedulers():
    client = make_client()
    pod = plain_pod("plain")
    del pod["spec"]["schedulerName"]
    service(client).apply(POD_KIND, "ADDED", pod)
    assert "its spec.schedulerName is default-scheduler" in post_bind(client, "default", "plain", "uid-plain", "node-01")


def test_bind_refuses_a_uid_that_is_not_the_watched_pods():
    client = make_client()
    watch(client, plain_pod("web"))
    error = post_bind(client, "default", "web", "uid-older-web", "node-01")
    assert error == "refusing to bind pod default/web: PodUID uid-older-web does not match the pod's UID uid-web"
    assert post_bind(client, "default", "web", "", "node-01").startswith("refusing to bind pod default/web: PodUID (empty)")
    assert not service(client).find_pod("default", "web")["spec"].get("nodeName")


def test_bind_refuses_a_pod_bound_elsewhere_and_binds_ours():
    client = make_client()
    watch(client, plain_pod("web"))
    assert post_bind(client, "default", "web", "uid-web", "node-01") == ""
    assert service(client).find_pod("default", "web")["spec"]["nodeName"] == "node-01"
    assert post_bind(client, "default", "web", "uid-web", "node-02") == "pod default/web is already bound to node-01"
    assert post_bind(client, "default", "web", "uid-web", "node-01") == ""          # kube-scheduler's retry


def test_every_profile_of_a_scheduler_name_list_is_ours():
    client = make_client(scheduler_name="tas-scheduler, tas-spread")
    pod = plain_pod("spread")
    pod["spec"]["schedulerName"] = "tas-spread"
    service(client).apply(POD_KIND, "ADDED", pod)
    assert post_bind(client, "default", "spread", "uid-spread", "node-01") == ""
    assert Settings(scheduler_name="a, b").scheduler_names == ("a", "b")
