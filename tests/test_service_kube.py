"""The service against a (fake) Kubernetes API server: list/watch into the state, gang pods scheduled
through the extender verbs, binds written as Bindings with placement annotations, restart rebuild."""
from __future__ import annotations

import copy

import pytest
from fastapi.testclient import TestClient

from app.placement import placement_annotation
from app.server import create_app
from app.settings import Settings
from app.state import GANG_ANNOTATION, SLOT_ANNOTATION
from topology.demo import demo_objects

from service_helpers import indexed_job, job_pods, schedule

fakekube = pytest.importorskip("fakekube")
fake_kube = fakekube.fake_kube          # the fixture
wait_until = fakekube.wait_until


def _seed(fake) -> dict:
    fake.install_crd("kai.scheduler", "v1alpha1", "topologies", "Topology", namespaced=False)
    for obj in demo_objects():
        if obj["kind"] in ("Node", "Pod") or obj["apiVersion"].startswith("kai.scheduler"):
            fake.create(copy.deepcopy(obj))
    job = indexed_job("llama", pods=8, gpus=4)
    created = fake.create(copy.deepcopy(job))
    for pod in job_pods(created):
        pod["metadata"].pop("uid", None)
        pod["metadata"].pop("resourceVersion", None)
        fake.create(pod)
    return created


def _app(fake) -> TestClient:
    from app.kube import adapters
    settings = Settings(in_cluster=False, kubeconfig="unused")
    return TestClient(create_app(settings, kube=lambda s, state: adapters(s, state, host=fake.url)))


def _pods(fake, job):
    return [fake.get("v1", "Pod", p["metadata"]["name"], namespace="team-a") for p in job_pods(job)]


def test_gang_scheduled_through_the_api_and_rebuilt_after_restart(fake_kube):
    job = _seed(fake_kube)
    with _app(fake_kube) as client:
        state = client.app.state.service
        wait_until(lambda: client.get("/readyz").status_code == 200, what="first sync")
        assert len(state.cluster.nodes) == 32 and "default" in state.cluster.topologies
        first = _pods(fake_kube, job)[:3]
        placed = [schedule(client, pod) for pod in first]
        for pod, node in zip(first, placed):
            stored = fake_kube.get("v1", "Pod", pod["metadata"]["name"], namespace="team-a")
            assert stored["spec"]["nodeName"] == node
            annotations = stored["metadata"]["annotations"]
            assert annotations[GANG_ANNOTATION] == "team-a/pg-llama-uid-llama"
            assert annotations[SLOT_ANNOTATION] == f"job-{pod['metadata']['name'].rsplit('-', 1)[1]}"
            assert annotations[placement_annotation(state.cluster.topologies["default"].levels[2])]
        block = {state.cluster.topologies["default"].node_path(state.cluster.node_index[n])[1] for n in placed}
        assert len(block) == 1
    with _app(fake_kube) as restarted:
        state = restarted.app.state.service
        wait_until(lambda: state.plans.get("team-a/pg-llama-uid-llama") is not None, what="plan restored")
        plan = state.plans.get("team-a/pg-llama-uid-llama")
        assert plan.counts() == {"planned": 5, "bound": 3, "unplaced": 0, "done": 0}
        rest = [schedule(restarted, pod) for pod in _pods(fake_kube, job)[3:]]
        tree = state.cluster.topologies["default"]
        assert {tree.node_path(state.cluster.node_index[n])[1] for n in rest} == block
        wait_until(lambda: all(p["spec"].get("nodeName") for p in _pods(fake_kube, job)), what="all bound")
