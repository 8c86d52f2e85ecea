"""Every request recorded from a real kube-scheduler v1.36 (tests/fixtures/kube-scheduler-1.36/) is a
test case: the service parses it, answers it, and the answer has the shape kube-scheduler accepted.

The recorded pods are plain pods, so the answers pass every node with neutral scores; the bind requests
are replayed after their filter, against a standalone cluster made of the recorded nodes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.server import create_app
from app.settings import Settings

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "kube-scheduler-1.36"
MODES = ("nodecache-true", "nodecache-false")



def _load(path: Path):
    return json.loads(path.read_bytes())


def _requests(mode: str, verb: str) -> list[Path]:
    folder = FIXTURES / mode
    return sorted(p for p in folder.glob(f"{verb}-*.json") if not p.name.endswith(".response.json")) \
        if folder.is_dir() else []


def _cases(verb: str) -> list:
    return [pytest.param(mode, path.name, id=f"{mode}/{path.stem}") for mode in MODES
            for path in _requests(mode, verb)]


def _recorded_nodes() -> list[dict]:
    """The eight nodes of the recording rig, from the nodecache-false requests (the largest list)."""
    nodes: dict[str, dict] = {}
    for path in _requests("nodecache-false", "filter"):
        for node in _load(path)["Nodes"]["items"]:
            nodes.setdefault(node["metadata"]["name"], node)
    return [{**node, "apiVersion": "v1", "kind": "Node"} for node in nodes.values()]


def _recorded_pods() -> list[dict]:
    """The pods of the recorded requests, as the service's watch would hold them: the verbs decide from the
    service's copy of a pod, never from the request body."""
    pods: dict[tuple, dict] = {}
    for mode in MODES:
        for verb in ("filter", "prioritize", "preempt"):
            for path in _requests(mode, verb):
                pod = _load(path).get("Pod")
                if pod:
                    metadata = pod["metadata"]
                    pods.setdefault((metadata.get("namespace"), metadata["name"]), {**pod, "apiVersion": "v1",
                                                                                     "kind": "Pod"})
    return list(pods.values())


@pytest.fixture(scope="module")
def client() -> TestClient:
    pods = _recorded_pods()
    profiles = sorted({pod["spec"].get("schedulerName") or "default-scheduler" for pod in pods})
    assert profiles == ["default-scheduler"]       # the recording rig's extender served the default profile
    app = create_app(Settings(scheduler_name=",".join(profiles)), objects=_recorded_nodes() + pods)
    return TestClient(app)


def _shape(value):
    """The JSON shape: types of values, keys of objects, element shape of lists."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__


def _names(answer: dict) -> list[str]:
    return [n["metadata"]["name"] for n in answer["Nodes"]["items"]]


@pytest.mark.parametrize("mode,name", _cases("filter"))
def test_filter_answer_has_the_recorded_shape(client, mode, name):
    request = _load(FIXTURES / mode / name)
    recorded = _load(FIXTURES / mode / name.replace(".json", ".response.json"))
    response = client.post("/scheduler/filter", content=(FIXTURES / mode / name).read_bytes())
    assert response.status_code == 200
    answer = response.json()
    for key in recorded:
        assert key in answer, f"answer lacks {key}"
    assert answer["Error"] == ""
    assert answer["FailedNodes"] == {} and answer["FailedAndUnresolvableNodes"] == {}
    assert isinstance(answer["NodeNames"], list)          # always a list: a missing one means "no node"
    if request["NodeNames"] is not None:
        assert answer["NodeNames"] == request["NodeNames"] == recorded["NodeNames"]
        assert answer["Nodes"] is None
    else:
        # nodeCacheCapable: false reads only Nodes: the unmodified node objects that pass
        assert _names(answer) == _names(recorded)
        assert answer["Nodes"]["items"] == recorded["Nodes"]["items"] == request["Nodes"]["items"]
        assert _shape(answer["Nodes"]) == _shape(recorded["Nodes"])
        assert answer["NodeNames"] == _names(recorded)


@pytest.mark.parametrize("mode,name", _cases("prioritize"))
def test_prioritize_answer_has_the_recorded_shape(client, mode, name):
    recorded = _load(FIXTURES / mode / name.replace(".json", ".response.json"))
    response = client.post("/scheduler/prioritize", content=(FIXTURES / mode / name).read_bytes())
    assert response.status_code == 200
    answer = response.json()
    assert _shape(answer) == _shape(recorded)
    pod = _load(FIXTURES / mode / name)["Pod"]
    if "nvidia.com/gpu" in str((pod.get("spec") or {}).get("containers")):
        # a GPU pod of no gang is scored to pack (--plain-pods binpack): same hosts, same order, 0-10
        assert [a["Host"] for a in answer] == [r["Host"] for r in recorded]
        assert all(0 <= a["Score"] <= 10 for a in answer) and max(a["Score"] for a in answer) == 10
    else:
        assert answer == recorded                  # same hosts, same order, neutral score 5


@pytest.mark.parametrize("mode,name", _cases("prioritize"))
def test_prioritize_with_neutral_plain_pods_answers_as_recorded(mode, name):
    client = TestClient(create_app(Settings(plain_pods="neutral"), objects=_recorded_nodes()))
    recorded = _load(FIXTURES / mode / name.replace(".json", ".response.json"))
    response = client.post("/scheduler/prioritize", content=(FIXTURES / mode / name).read_bytes())
    assert response.json() == recorded             # same hosts, same order, neutral score 5


@pytest.mark.parametrize("mode,name", _cases("bind"))
def test_bind_after_filter_succeeds_like_the_recorded_one(client, mode, name):
    request = _load(FIXTURES / mode / name)
    recorded = _load(FIXTURES / mode / name.replace(".json", ".response.json"))
    number = name.split("-")[1]
    client.post("/scheduler/filter", content=(FIXTURES / mode / f"filter-{number}").read_bytes())
    response = client.post("/scheduler/bind", content=(FIXTURES / mode / name).read_bytes())
    assert response.status_code == 200
    assert response.json() == recorded == {"Error": ""}
    service = client.app.state.service
    bound = service.find_pod(request["PodNamespace"], request["PodName"])
    assert bound["spec"]["nodeName"] == request["Node"]
    again = client.post("/scheduler/bind", content=(FIXTURES / mode / name).read_bytes())
    assert again.json() == {"Error": ""}          # a retry of the same bind succeeds


def test_every_recorded_request_is_covered():
    covered = sum(len(_requests(mode, verb)) for mode in MODES for verb in ("filter", "prioritize", "bind"))
    everything = sum(1 for p in FIXTURES.glob("*/*.json") if not p.name.endswith(".response.json"))
    assert covered == everything > 0
