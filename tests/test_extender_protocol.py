"""The wire protocol's edges: always HTTP 200, errors in `Error`, bounded bodies, both node modes."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.extender.models import ExtenderFilterResult, HostPriority

from service_helpers import filter_, indexed_job, job_pods, make_client, plain_pod, service, watch


@pytest.fixture(scope="module")
def client():
    return make_client(max_request_bytes=64 * 1024)


@pytest.mark.parametrize("verb", ["filter", "bind"])
def test_malformed_json_gets_a_clear_error(client, verb):
    response = client.post(f"/scheduler/{verb}", content=b"{not json")
    assert response.status_code == 200
    assert "not valid JSON" in response.json()["Error"]
    if verb == "filter":
        assert response.json()["NodeNames"] == []


def test_unknown_shape_names_the_missing_field(client):
    answer = client.post("/scheduler/filter", json={"NodeNames": ["node-01"]}).json()
    assert "Pod" in answer["Error"] and "Field required" in answer["Error"]
    answer = client.post("/scheduler/bind", json={"PodName": "x"}).json()
    assert "PodNamespace" in answer["Error"]
    answer = client.post("/scheduler/filter", content=b"[1, 2]").json()
    assert "must be a JSON object" in answer["Error"]


def test_prioritize_and_preempt_errors_answer_empty_with_a_header(client):
    response = client.post("/scheduler/prioritize", content=b"nope")
    assert response.status_code == 200 and response.json() == []
    assert "not valid JSON" in response.headers["X-Extender-Error"]
    response = client.post("/scheduler/preempt", json={"Pod": "not an object"})
    assert response.status_code == 200 and response.json() == {"NodeNameToMetaVictims": {}}
    assert "Pod" in response.headers["X-Extender-Error"]


@pytest.mark.parametrize("pods", [[{"metadata": 5}], [{"metadata": {"uid": 5}}]])
def test_a_victim_without_a_readable_uid_is_named(client, pods):
    response = client.post("/scheduler/preempt", json={"Pod": plain_pod("p"), "NodeNameToVictims": {
        "node-01": {"Pods": pods}}})
    assert response.status_code == 200 and response.json() == {"NodeNameToMetaVictims": {}}
    assert "NodeNameToVictims.node-01.Pods: pods[0].metadata.uid is required (a string)" in \
        response.headers["X-Extender-Error"]


def test_request_bodies_are_bounded(client):
    big = json.dumps({"Pod": plain_pod("big"), "NodeNames": ["n" * 100] * 1000}).encode()
    response = client.post("/scheduler/filter", content=big)
    assert response.status_code == 200
    assert "exceeds the limit of 65536 bytes" in response.json()["Error"]

    def chunks():
        for _ in range(100):
            yield b" " * 1024
    response = client.post("/scheduler/filter", content=chunks())
    assert "exceeds the limit" in response.json()["Error"]


def test_errors_are_counted_in_metrics(client):
    client.post("/scheduler/bind", content=b"{")
    assert b'tas_extender_request_errors_total{verb="bind"}' in client.get("/metrics").content


def test_node_cache_false_mode_answers_with_the_node_objects_of_the_planned_node():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    nodes = [{"metadata": {"name": n, "labels": {"x": "y"}}, "status": {}} for n in service(client).cluster.node_names]
    watch(client, job_pods(job)[0])
    body = {"Pod": job_pods(job)[0], "Nodes": {"metadata": {"resourceVersion": "7"}, "items": nodes}, "NodeNames": None}
    answer = client.post("/scheduler/filter", json=body).json()
    assert len(answer["Nodes"]["items"]) == 1 and answer["Nodes"]["metadata"] == {"resourceVersion": "7"}
    planned = answer["Nodes"]["items"][0]
    assert planned in nodes and answer["NodeNames"] == [planned["metadata"]["name"]]
    ExtenderFilterResult.model_validate(answer)
    scores = client.post("/scheduler/prioritize", json=body).json()
    assert {s["Host"] for s in scores} == {n["metadata"]["name"] for n in nodes}
    assert [HostPriority.model_validate(s).Score for s in scores if s["Host"] == planned["metadata"]["name"]] == [10]


def test_empty_candidate_list_is_answered_with_an_empty_list():
    client = make_client()
    answer = filter_(client, plain_pod("web"), names=[])
    assert answer["NodeNames"] == [] and answer["Error"] == ""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                         lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                             st.sampled_from(["Pod", "Nodes", "NodeNames", "PodName", "Node", "metadata", "items",
                                              "NodeNameToMetaVictims", "Pods", "UID"]), inner, max_size=4),
                         max_leaves=12),
       verb=st.sampled_from(["filter", "prioritize", "bind", "preempt"]))
def test_any_json_body_gets_a_200_answer(client, body, verb):
    response = client.post(f"/scheduler/{verb}", json=body)
    assert response.status_code == 200
    answer = response.json()
    if verb == "filter":
        assert isinstance(answer["NodeNames"], list)
    elif verb == "prioritize":
        assert isinstance(answer, list) and all(0 <= s["Score"] <= 10 for s in answer)
    elif verb == "bind":
        assert isinstance(answer["Error"], str)
    else:
        assert isinstance(answer["NodeNameToMetaVictims"], dict)


@settings(max_examples=200, deadline=None)
@given(hosts=st.lists(st.text(max_size=8) | st.text(alphabet=',"\\:{}ab', max_size=6), max_size=20),
       score=st.integers(0, 10))
def test_uniform_scores_are_valid_json_for_any_names(hosts, score):
    from app.extender.routes import uniform_scores
    assert json.loads(uniform_scores(hosts, score)) == [{"Host": h, "Score": score} for h in hosts]


@pytest.mark.parametrize("item", [{"metadata": "x"}, {"metadata": {"name": 5}}, {"metadata": {}}])
def test_filter_with_a_node_object_without_a_name_names_the_field(client, item):
    body = client.post("/scheduler/filter", json={"Pod": plain_pod("p"), "Nodes": {"items": [item]}}).json()
    assert body["NodeNames"] == [] and "internal error" not in body["Error"]
    assert "Nodes.items: items[0].metadata.name is required (a non-empty string)" in body["Error"]
