"""Issue 14 item 2: victims are only what the preemptor needs, inside one domain. Pods of no gang
(ReplicaSet, Deployment, StatefulSet pods without gang settings, bare pods) go one by one, lowest
priority first; DaemonSet and static (mirror) pods are never victims; a gang goes whole."""
from __future__ import annotations

import copy

from fastapi.testclient import TestClient

from app.server import create_app
from app.settings import Settings

from service_helpers import GPU, Clock, filter_, job_pods, refusal
from test_preemption_service import RecordingWriter, fabric_nodes, job, llm_job, running


def owned_pod(name: str, node: int, *, kind: str, owner: str, gpus: int = 8, cpu: str = "1", priority: int = 0,
              annotations: dict | None = None, namespace: str = "web") -> dict:
    requests = {"cpu": cpu, **({GPU: str(gpus)} if gpus else {})}
    metadata = {"name": name, "namespace": namespace, "uid": f"uid-{name}", "annotations": annotations or {}}
    if kind:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": kind, "name": owner,
                                        "uid": f"uid-{owner}", "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"nodeName": f"node-{node:02d}", "priority": priority,
                     "containers": [{"name": "main", "image": "app", "resources": {"requests": requests}}]},
            "status": {"phase": "Running"}}


def daemonset_pods() -> list[dict]:
    """A device plugin on every node (10m CPU) and a static pod on every node."""
    pods = [owned_pod(f"plugin-{i}", i, kind="DaemonSet", owner="plugin", gpus=0, cpu="10m", namespace="kube-system")
            for i in range(12)]
    pods += [owned_pod(f"static-{i}", i, kind="Node", owner=f"node-{i:02d}", gpus=0, cpu="10m", namespace="kube-system",
                       annotations={"kubernetes.io/config.mirror": "abc"}) for i in range(12)]
    return pods


def client_with(pods: list[dict], preemption: str = "on") -> tuple[TestClient, RecordingWriter]:
    objects = fabric_nodes() + [llm_job(), job("high", "research", 4, priority=2000)] + pods
    app = create_app(Settings(preemption=preemption), objects=copy.deepcopy(objects), clock=Clock(),
                     writer=RecordingWriter)
    return TestClient(app), app.state.engine.writer


def evicted(writer: RecordingWriter) -> list[str]:
    return sorted(f"{ns}/{name}" for ns, name, _ in writer.evictions)


def test_replicaset_pods_are_victims_one_by_one_inside_the_chosen_domain():
    replicas = [owned_pod(f"web-{i}", i, kind="ReplicaSet", owner="web-abc") for i in range(12)]
    client, writer = client_with(replicas + daemonset_pods())
    answer = filter_(client, job_pods(llm_job())[0])
    assert answer["NodeNames"] == []
    assert "waiting for 8 victims" in refusal(answer)
    victims = evicted(writer)
    # the gang needs one leaf: 8 nodes; only leaf-b (nodes 4-11) has 8, and only its 8 replicas go
    assert victims == sorted(f"web/web-{i}" for i in range(4, 12))


def test_lowest_priority_first_then_fewest_evicted():
    # leaf-b: unit-1 (nodes 4-7) runs priority-5 pods, unit-2 (nodes 8-11) priority-1 pods; a 4-pod gang
    # needing one unit takes unit-2; unit-0 is full of priority-1 pods, two per node (more evictions)
    pods = [owned_pod(f"mid-{i}", i, kind="ReplicaSet", owner="mid", priority=5) for i in range(4, 8)]
    pods += [owned_pod(f"low-{i}", i, kind="ReplicaSet", owner="low", priority=1) for i in range(8, 12)]
    pods += [owned_pod(f"half-{i}-{j}", i, kind="", owner="", gpus=4, priority=1) for i in range(4) for j in range(2)]
    small = job("small", "prod", 4, priority=1000, annotations={"kai.scheduler/topology": "fabric",
                                                                 "kai.scheduler/topology-required-placement": "unit"})
    objects = fabric_nodes() + [small] + pods + daemonset_pods()
    app = create_app(Settings(preemption="on"), objects=copy.deepcopy(objects), clock=Clock(), writer=RecordingWriter)
    writer = app.state.engine.writer
    client = TestClient(app)
    filter_(client, job_pods(small)[0])
    assert evicted(writer) == sorted(f"web/low-{i}" for i in range(8, 12))


def test_daemonset_and_static_pods_are_never_victims():
    # nodes 4-11 run only DaemonSet and static pods (here GPU-hungry ones): evicting them would free
    # nothing, they come back on the same node; nodes 0-3 hold a priority-2000 job
    hungry = [owned_pod(f"agent-{i}", i, kind="DaemonSet", owner="agent", namespace="kube-system")
              for i in range(4, 8)]
    hungry += [owned_pod(f"static-gpu-{i}", i, kind="Node", owner=f"node-{i:02d}", namespace="kube-system",
                         annotations={"kubernetes.io/config.mirror": "abc"}) for i in range(8, 12)]
    high = job("high", "research", 4, priority=2000)
    client, writer = client_with(hungry + daemonset_pods() + running(high, 0))
    answer = filter_(client, job_pods(llm_job())[0])
    assert answer["NodeNames"] == [] and writer.evictions == []
    assert "waiting for" not in refusal(answer)


def test_a_gang_goes_whole_and_counts_all_its_pods():
    # job-a (4 pods, nodes 0-3) vs 4 single replicas on nodes 8-11: a 4-pod unit gang takes the replicas'
    # unit (4 pods evicted, no gang broken) rather than breaking job-a
    job_a = job("job-a", "research", 4, priority=0)
    replicas = [owned_pod(f"web-{i}", i, kind="ReplicaSet", owner="web-abc") for i in range(8, 12)]
    filler = [owned_pod(f"hi-{i}", i, kind="ReplicaSet", owner="hi", priority=2000) for i in range(4, 8)]
    small = job("small", "prod", 4, priority=1000, annotations={"kai.scheduler/topology": "fabric",
                                                                 "kai.scheduler/topology-required-placement": "unit"})
    objects = fabric_nodes() + [job_a, small] + running(job_a, 0) + replicas + filler
    app = create_app(Settings(preemption="on"), objects=copy.deepcopy(objects), clock=Clock(), writer=RecordingWriter)
    writer = app.state.engine.writer
    filter_(TestClient(app), job_pods(small)[0])
    assert evicted(writer) == sorted(f"web/web-{i}" for i in range(8, 12))


def test_dry_run_reports_exactly_what_would_be_evicted():
    replicas = [owned_pod(f"web-{i}", i, kind="ReplicaSet", owner="web-abc") for i in range(12)]
    client, writer = client_with(replicas + daemonset_pods(), preemption="dry-run")
    answer = filter_(client, job_pods(llm_job())[0])
    assert writer.evictions == []
    assert "would evict 8 pods in leaf-b" in refusal(answer)
    plan = next(p for p in client.get("/debug/plans").json()["plans"] if p["namespace"] == "prod")
    detail = client.get(f"/debug/plans/{plan['gang']}").json()
    assert sorted(v["pod"] for v in detail["preemption"]["victims"]) == sorted(f"web/web-{i}" for i in range(4, 12))
