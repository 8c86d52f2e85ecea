"""Any field of a pod or of its workload set to a value of the wrong type gets a clear refusal naming
what is wrong, never an internal error: the webhook (a hand-made review) and the extender's filter (a
workload of a custom kind whose schema let it through, or one fed to /debug/objects)."""
from __future__ import annotations

import copy
import json

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grouper import expand_pods
from service_helpers import make_client
from webhook_helpers import PAYLOADS, make_app, owners, payload, review_of

WRONG = st.sampled_from(["x", "", 5, -1, True, None, [], [5], {"a": 5}, {"a": {"b": []}}])


def paths(obj, prefix: tuple = ()):
    """Every path into obj (the first three items of a list)."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj[:3]) if isinstance(obj, list) else ()
    for key, value in items:
        yield (*prefix, key)
        yield from paths(value, (*prefix, key))


def with_value(obj: dict, path: tuple, value) -> dict:
    obj = copy.deepcopy(obj)
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return obj


# what else kube-scheduler reads of a pod: host ports, hostname spread, pod-level resources, DRA claims
SCHEDULING_FIELDS = {
    "hostNetwork": True, "resources": {"requests": {"cpu": "2"}, "limits": {"memory": "1Gi"}},
    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpus"}],
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                   "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {}}}]}


def with_scheduling_fields(spec: dict) -> dict:
    spec = {**copy.deepcopy(spec), **copy.deepcopy(SCHEDULING_FIELDS)}
    spec["containers"][0]["ports"] = [{"containerPort": 29500, "hostPort": 29500, "protocol": "TCP"}]
    return spec


def scheduling_review() -> dict:
    review = payload("tfjob-worker-5")
    review["request"]["object"]["spec"] = with_scheduling_fields(review["request"]["object"]["spec"])
    return review


def scheduling_owner() -> dict:
    job = copy.deepcopy(owners()["sweep"])
    template = job["spec"]["template"]
    template["spec"] = with_scheduling_fields(template["spec"])
    return job


REVIEWS = [payload(name) for name in PAYLOADS if isinstance(payload(name)["request"].get("object"), dict)]
REVIEWS.append(scheduling_review())
REVIEW_PATHS = [(i, path) for i, review in enumerate(REVIEWS) for path in paths(review["request"]["object"])]
WEBHOOK = TestClient(make_app()[0], raise_server_exceptions=False)


@settings(max_examples=300, deadline=None)
@given(case=st.sampled_from(REVIEW_PATHS), value=WRONG)
def test_a_review_with_a_pod_field_of_the_wrong_type_is_answered_not_an_internal_error(case, value):
    index, path = case
    review = copy.deepcopy(REVIEWS[index])
    review["request"]["object"] = with_value(review["request"]["object"], path, value)
    response = WEBHOOK.post("/mutate", content=json.dumps(review))
    assert response.status_code == 200, (path, value, response.text[:300])
    assert response.json()["response"]["uid"] == review["request"]["uid"]


OWNERS = [owner for owner in owners().values() if expand_pods(owner)] + [scheduling_owner()]
SKIPPED = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace"), ("metadata", "uid")}
OWNER_PATHS = [(i, path) for i, owner in enumerate(OWNERS) for path in paths(owner) if path[:2] not in SKIPPED
               and path[:1] not in SKIPPED]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(OWNER_PATHS), value=WRONG)
def test_a_workload_field_of_the_wrong_type_never_makes_an_internal_error(case, value):
    index, path = case
    owner = OWNERS[index]
    pod = expand_pods(owner)[-1]
    client = make_client()
    added = client.post("/debug/objects", content=json.dumps(with_value(owner, path, value)))
    assert added.status_code in (200, 400, 422), (path, value, added.text[:300])
    review = client.post("/mutate", content=json.dumps(review_of(copy.deepcopy(pod), owner["kind"])))
    assert review.status_code == 200, (path, value, review.text[:300])
    nodes = client.app.state.service.cluster.node_names[:4]
    answer = client.post("/scheduler/filter", content=json.dumps({"Pod": pod, "NodeNames": nodes})).json()
    assert "internal error" not in answer["Error"], (path, value, answer["Error"])


GANG_POD = expand_pods(scheduling_owner())[0]
POD_PATHS = [path for path in paths(GANG_POD) if path[:1] == ("spec",)]
FILTER = make_client()
FILTER.post("/debug/objects", content=json.dumps(scheduling_owner()))


@settings(max_examples=200, deadline=None)
@given(path=st.sampled_from(POD_PATHS), value=WRONG)
def test_a_gang_pod_with_a_field_of_the_wrong_type_is_refused_naming_it(path, value):
    """kube-scheduler sends only pods the API server admitted; a hand-made one still gets a refusal that
    names the field, not an internal error (found for quantities: container and pod-level resources)."""
    nodes = FILTER.app.state.service.cluster.node_names[:4]
    pod = with_value(GANG_POD, path, value)
    response = FILTER.post("/scheduler/filter", content=json.dumps({"Pod": pod, "NodeNames": nodes}))
    assert response.status_code == 200, (path, value, response.text[:300])
    assert "internal error" not in response.json()["Error"], (path, value, response.json()["Error"])
