"""Helpers for the service tests (test_extender*, test_service*, test_debug*): a standalone app on the
demo cluster with a workload, and the extender calls kube-scheduler would make."""
from __future__ import annotations

import copy

from fastapi.testclient import TestClient

from app.server import create_app
from app.settings import Settings
from app.state import POD_KIND
from grouper import expand_pods
from topology.demo import demo_objects

GPU = "nvidia.com/gpu"
WAKE = "tas-extender.io/wake"
SCHEDULER = "tas-scheduler"       # the profile the extender binds for (Settings.scheduler_name)


class Clock:
    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def indexed_job(name: str, pods: int, gpus: int, *, required: str | None = "block", segment: int | None = 4,
                segment_level: str = "rack", namespace: str = "team-a") -> dict:
    """An Indexed batch/v1 Job opting into the `default` demo topology."""
    annotations = {"kai.scheduler/topology": "default"}
    if required:
        annotations["kai.scheduler/topology-required-placement"] = required
    template_annotations = {}
    if segment:
        template_annotations = {"kai.scheduler/segment-size": str(segment),
                                "kai.scheduler/segment-topology-required-placement": segment_level}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "1",
                     "annotations": annotations},
        "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                 "template": {"metadata": {"annotations": template_annotations},
                              "spec": {"containers": [{"name": "main", "image": "trainer",
                                                       "resources": {"limits": {GPU: str(gpus)}}}]}}},
    }


def job_pods(job: dict) -> list[dict]:
    pods = expand_pods(job)
    for pod in pods:
        pod["spec"].setdefault("schedulerName", SCHEDULER)
        pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}"
        pod["metadata"]["resourceVersion"] = "1"
        pod["status"] = {"phase": "Pending"}
    return pods


def job_with_affinity(job: dict, labels: dict, affinity: dict) -> tuple[dict, list[dict]]:
    """`job` with `labels` and `affinity` on its template, and its pods carrying them as admitted."""
    template = job["spec"]["template"]
    template["metadata"]["labels"] = dict(labels)
    template["spec"]["affinity"] = copy.deepcopy(affinity)
    made = job_pods(job)
    for pod in made:
        pod["metadata"].setdefault("labels", {}).update(labels)
        pod["spec"]["affinity"] = copy.deepcopy(affinity)
    return job, made


def plain_pod(name: str, gpus: int = 0, cpu: str = "1", namespace: str = "default") -> dict:
    requests = {"cpu": cpu}
    if gpus:
        requests[GPU] = str(gpus)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": {"schedulerName": SCHEDULER,
                     "containers": [{"name": "main", "image": "app", "resources": {"requests": requests}}]},
            "status": {"phase": "Pending"}}


def make_client(*workloads: dict, clock: Clock | None = None, objects: list[dict] | None = None,
                elector=None, **settings) -> TestClient:
    base = objects if objects is not None else demo_objects()
    app = create_app(Settings(**settings), objects=[*copy.deepcopy(base), *workloads],
                     clock=clock or Clock(), elector=elector)
    return TestClient(app)


def service(client: TestClient):
    return client.app.state.service


def engine(client: TestClient):
    """The GangScheduler (app.scheduling) behind the client's extender verbs."""
    return client.app.state.engine


def node_names(client: TestClient) -> list[str]:
    """The nodes kube-scheduler would offer now: the model refreshed first (node events only mark it stale)."""
    state = service(client)
    state.refresh()
    return list(state.cluster.node_names)


def watch(client: TestClient, pod: dict) -> None:
    """The pod as the watch delivers it, unless the service already has it: the verbs decide from the
    service's copy of a pod, never from the request body (a test that changes a pod re-applies it). A pod
    that names no scheduler is taken as one of the extender's profile (only those reach its verbs)."""
    state = service(client)
    metadata = pod["metadata"]
    stored = state.objects.get("Pod", metadata.get("namespace") or "default", metadata["name"])
    delivered = copy.deepcopy(pod)
    delivered.setdefault("spec", {}).setdefault("schedulerName", SCHEDULER)
    if stored is None:
        state.apply(POD_KIND, "ADDED", delivered)
    elif not (stored.get("spec") or {}).get("nodeName") and _changed(stored, delivered):
        state.apply(POD_KIND, "MODIFIED", delivered)      # the test changed the pending pod: its new version


def _changed(stored: dict, pod: dict) -> bool:
    """The test sent another version of a pending pod than the service holds (the service's own wake-up
    annotation and resource version aside)."""
    def seen(obj: dict) -> tuple:
        metadata = obj.get("metadata") or {}
        annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if k != WAKE}
        return (obj.get("spec"), metadata.get("labels") or {}, annotations, metadata.get("ownerReferences"),
                metadata.get("uid"))
    return seen(stored) != seen(pod)


def filter_(client: TestClient, pod: dict, names: list[str] | None = None) -> dict:
    watch(client, pod)
    body = {"Pod": pod, "Nodes": None, "NodeNames": node_names(client) if names is None else names}
    response = client.post("/scheduler/filter", json=body)
    assert response.status_code == 200
    return response.json()


def prioritize(client: TestClient, pod: dict, names: list[str] | None = None) -> dict[str, int]:
    watch(client, pod)
    body = {"Pod": pod, "Nodes": None, "NodeNames": node_names(client) if names is None else names}
    response = client.post("/scheduler/prioritize", json=body)
    assert response.status_code == 200
    return {entry["Host"]: entry["Score"] for entry in response.json()}


def bind(client: TestClient, pod: dict, node: str) -> str:
    metadata = pod["metadata"]
    response = client.post("/scheduler/bind", json={"PodName": metadata["name"], "PodNamespace": metadata["namespace"],
                                                    "PodUID": metadata["uid"], "Node": node})
    assert response.status_code == 200
    return response.json()["Error"]


def schedule(client: TestClient, pod: dict, names: list[str] | None = None) -> str:
    """filter -> prioritize -> bind the best node, as kube-scheduler does; the node chosen."""
    answer = filter_(client, pod, names)
    assert answer["Error"] == "", answer["Error"]
    assert answer["NodeNames"], f"no node for {pod['metadata']['name']}: {set(failures(answer).values())}"
    scores = prioritize(client, pod, answer["NodeNames"])
    node = max(answer["NodeNames"], key=lambda n: scores[n])
    assert bind(client, pod, node) == ""
    return node


def preempt(client: TestClient, pod: dict, victims: dict[str, list[str]]) -> dict[str, list[str]]:
    """The preempt verb as kube-scheduler calls it (node -> candidate victims' UIDs): what it keeps."""
    watch(client, pod)
    body = {"Pod": pod, "NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": 0} for node, uids in victims.items()}}
    response = client.post("/scheduler/preempt", json=body)
    assert response.status_code == 200
    return {node: [p["UID"] for p in v["Pods"]] for node, v in response.json()["NodeNameToMetaVictims"].items()}

def domain_of(client: TestClient, node: str, level: str) -> str:
    state = service(client)
    state.refresh()                           # node events only mark the model stale
    cluster = state.cluster
    tree = cluster.topologies["default"]
    index = tree.level_index(level)
    return tree.domain_ids[index][int(tree.node_domain[index][cluster.node_index[node]])]


def failures(answer: dict) -> dict[str, str]:
    """A filter answer's failed nodes, resolvable or not (node -> reason)."""
    return {**(answer.get("FailedNodes") or {}), **(answer.get("FailedAndUnresolvableNodes") or {})}


def refusal(answer: dict) -> str:
    """The reason of a filter answer that passes no node (every failed node gives the same one)."""
    reasons = set(failures(answer).values())
    assert answer["NodeNames"] == [] and len(reasons) == 1, (answer["NodeNames"], reasons)
    return reasons.pop()
