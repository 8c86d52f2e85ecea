"""Helpers for the webhook tests: the fixture payloads, a minimal app with the webhook router and a
stand-in service state, and applying the returned patch."""
from __future__ import annotations

import base64
import copy
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path

import jsonpatch
import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.metrics import Metrics
from app.state.identities import IdentityCache
from app.state.objects import ObjectCache
from app.ports import WATCHED_KINDS, WatchedKind
from app.http.webhook import router
from app.webhook.caches import OwnerWaits
from topology.cluster import Cluster
from topology.demo import demo_objects
from topology.objects import ClusterObjects

FIXTURES = Path(__file__).parent / "fixtures" / "admission"
_spec = importlib.util.spec_from_file_location("admission_fixtures", FIXTURES / "generate.py")
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)

PAYLOADS = sorted(p.stem for p in FIXTURES.glob("*.json"))


def payload(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def owners() -> dict[str, dict]:
    return copy.deepcopy(generate.owners())


def review_of(pod: dict, owner_kind: str = "Job", namespace: str | None = None, seed: str = "case") -> dict:
    """A pod (e.g. from grouper.expand_pods) as the API server would send it."""
    namespace = namespace or pod["metadata"].get("namespace") or "default"
    return generate.review(pod, owner_kind, namespace=namespace, seed=seed)


def watched_kind(obj: dict) -> WatchedKind:
    api_version = obj.get("apiVersion", "")
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    return next(k for k in WATCHED_KINDS if k.kind == obj["kind"] and k.group == group)


@dataclass
class StandInSettings:
    set_scheduler_name: bool = False
    scheduler_name: str = "tas-scheduler"
    webhook_owner_grace: float = 30.0
    max_request_bytes: int = 128 * 2**20


@dataclass
class StandInState:
    objects: ObjectCache
    cluster: Cluster
    settings: StandInSettings = field(default_factory=StandInSettings)
    metrics: Metrics = field(default_factory=Metrics)
    identities: IdentityCache = field(init=False)

    def __post_init__(self):
        self.identities = IdentityCache(lambda: self.objects.list("PriorityClass"))

    @property
    def topologies(self):
        return self.cluster.topologies


class Clock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def demo_cluster() -> Cluster:
    return Cluster.from_objects(ClusterObjects.from_objects(demo_objects()))


def make_app(owner_objects=None, settings: StandInSettings | None = None, clock: Clock | None = None
             ) -> tuple[FastAPI, StandInState]:
    cache = ObjectCache()
    for obj in owners().values() if owner_objects is None else owner_objects:
        cache.apply(watched_kind(obj), "ADDED", obj)
    state = StandInState(cache, demo_cluster(), settings or StandInSettings())
    app = FastAPI()
    app.include_router(router)
    app.state.service = state
    app.state.webhook_owner_waits = OwnerWaits(clock=clock or Clock())
    return app, state


def post(client: TestClient, body) -> tuple[int, dict]:
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    answer = client.post("/mutate", content=content, headers={"Content-Type": "application/json"})
    return answer.status_code, answer.json()


def operations(response: dict) -> list[dict]:
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


def patched(body: dict, response: dict) -> dict:
    """The pod after the API server applied the response's patch."""
    return jsonpatch.apply_patch(body["request"]["object"], operations(response))


def env_of(container: dict) -> dict[str, object]:
    """name -> value, or the fieldPath of a downward-API var."""
    found = {}
    for var in container.get("env") or []:
        if "valueFrom" in var:
            found[var["name"]] = var["valueFrom"]["fieldRef"]["fieldPath"]
        else:
            found[var["name"]] = var["value"]
    return found


def load_yaml(text: str) -> dict:
    return yaml.safe_load(text)
