"""`POST /debug/objects` refuses a field of the wrong JSON type with a 4xx naming it, for every kind, as the API
server's schema would; it never answers 500 (it did for a non-string apiVersion, with a traceback)."""
from __future__ import annotations

import copy
import json

import paths
import pytest
import yaml
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from app import object_types
from app.object_types import type_problem
from service_helpers import make_client
from test_bad_input_properties import with_value
from topology.demo import demo_objects

FIXTURES = paths.FIXTURES


def _objects() -> list[dict]:
    found = {}
    for obj in [*demo_objects(), *(o for f in sorted((FIXTURES / "workloads").glob("*.yaml"))
                                   for o in yaml.safe_load_all(f.read_text()) if o),
                *(o for o in yaml.safe_load_all((FIXTURES / "admission" / "owners.yaml").read_text()) if o)]:
        found.setdefault((obj["apiVersion"], obj["kind"]), obj)       # one object of every kind
    return list(found.values())


OBJECTS = _objects()
CLIENT = TestClient(make_client().app, raise_server_exceptions=False)


def _string_paths(value, path=()):
    if isinstance(value, str):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _string_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:2]):
            yield from _string_paths(item, (*path, index))


def _checked(obj: dict, path: tuple) -> bool:
    """Paths the schema covers: every field of a built-in kind or of KAI's Topology, and of any other kind
    its identity, metadata and pod templates (their own fields are the grouper's to refuse)."""
    if f"{obj['apiVersion']}/{obj['kind']}" in object_types._types()["kinds"] or path[0] in ("apiVersion", "kind",
                                                                                               "metadata"):
        return True
    return any(key in ("template", "leaderTemplate", "workerTemplate") for key in path)


CASES = [(i, path) for i, obj in enumerate(OBJECTS) for path in _string_paths(obj) if _checked(obj, path)]
WRONG = st.sampled_from([True, [], ["x"], {"a": "b"}])     # numbers are valid quantities and int-or-strings


def test_every_kind_of_the_fixtures_is_covered_and_valid():
    kinds = {obj["kind"] for obj in OBJECTS}
    assert {"Node", "Pod", "Topology", "Job", "TFJob", "PyTorchJob", "MPIJob", "LeaderWorkerSet", "JobSet",
            "StatefulSet", "PodGroup"} <= kinds
    for obj in OBJECTS:
        assert type_problem(obj) is None, (obj["kind"], type_problem(obj))


@pytest.mark.parametrize("field", ["apiVersion", "kind"])
@pytest.mark.parametrize("value", [5, None, ["v1"], {"a": 1}])
def test_a_non_string_api_version_or_kind_is_a_4xx_naming_it(field, value):
    for obj in OBJECTS:
        response = CLIENT.post("/debug/objects", content=json.dumps(with_value(obj, (field,), value)))
        assert response.status_code in (400, 422), (obj["kind"], response.text)
        assert field in response.json()["detail"]


@settings(max_examples=400, deadline=None)
@given(case=st.sampled_from(CASES), value=WRONG)
def test_any_string_field_of_any_kind_set_to_another_type_is_a_4xx_naming_it(case, value):
    index, path = case
    obj = OBJECTS[index]
    response = CLIENT.post("/debug/objects", content=json.dumps(with_value(obj, path, value)))
    assert 400 <= response.status_code < 500, (obj["kind"], path, value, response.text[:300])
    detail = response.json()["detail"]
    named = str(path[-1]) if isinstance(path[-1], str) else f"[{path[-1]}]"
    assert named in detail, (obj["kind"], path, value, detail)


@pytest.mark.parametrize("kind, path", [
    ("Pod", ("spec", "containers", 0, "image")), ("Node", ("metadata", "labels", "kubernetes.io/hostname")),
    ("Topology", ("spec", "levels", 0, "nodeLabel")), ("TFJob", ("metadata", "annotations", "kai.scheduler/topology")),
    ("Job", ("spec", "template", "spec", "containers", 0, "name")),
    ("LeaderWorkerSet", ("metadata", "name"))])
def test_a_number_where_a_string_belongs_is_a_4xx_naming_it(kind, path):
    obj = next(o for o in OBJECTS if o["kind"] == kind and o["apiVersion"] != "kueue.x-k8s.io/v1beta1")
    response = CLIENT.post("/debug/objects", content=json.dumps(with_value(obj, path, 5)))
    assert response.status_code in (400, 422), response.text
    assert "must be a string, got 5" in response.json()["detail"] and str(path[-1]) in response.json()["detail"]


def test_nothing_is_applied_when_one_object_of_the_body_is_wrong():
    client = make_client()
    good = copy.deepcopy(next(o for o in OBJECTS if o["kind"] == "Job"))
    good["metadata"]["name"] = "fine"
    bad = with_value(good, ("metadata", "name"), "bad") | {"apiVersion": 1}
    response = client.post("/debug/objects", content=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                 "items": [good, bad]}))
    assert response.status_code == 400
    assert client.app.state.service.objects.get("Job", good["metadata"].get("namespace"), "fine") is None


def test_object_types_json_is_what_the_generator_makes_from_the_schemas():
    """app/object_types.json is generated (python -m app.object_types): it must match the schemas."""
    assert object_types.render(object_types.build()) == object_types.FILE.read_text()
