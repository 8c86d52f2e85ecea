"""The protocol layer of the webhook: AdmissionReview parsing, the response envelope, JSON Patch building."""
from __future__ import annotations

import base64
import copy

import jsonpatch
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.webhook.patch import append_env, escape, pointer, set_entries, set_value
from app.webhook.review import MalformedReview, build_response, parse_review


def _review(**request_changes) -> dict:
    request = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "research",
        "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller",
                     "groups": ["system:authenticated"]},
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "x-"}, "spec": {"containers": []}},
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    request.update(request_changes)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


# --- parsing -------------------------------------------------------------------------------------------
def test_parse_reads_the_fields_the_api_server_sends():
    review = parse_review(orjson.dumps(_review(dryRun=True)))
    request = review.request
    assert request.uid == "705ab4f5-6393-11e8-b7cc-42010a800002"
    assert (request.kind.kind, request.resource.resource, request.operation) == ("Pod", "pods", "CREATE")
    assert request.namespace == "research" and request.dry_run is True
    assert request.old_object is None and request.object["metadata"]["generateName"] == "x-"
    assert request.user_info.username.endswith("job-controller")


def test_not_json_has_no_uid_to_answer():
    with pytest.raises(MalformedReview, match="not JSON") as caught:
        parse_review(b"{not json")
    assert caught.value.uid is None


def test_a_json_array_is_refused():
    with pytest.raises(MalformedReview, match="got list"):
        parse_review(b"[]")


def test_v1beta1_is_refused_but_answerable():
    body = _review()
    body["apiVersion"] = "admission.k8s.io/v1beta1"
    with pytest.raises(MalformedReview, match="admissionReviewVersions") as caught:
        parse_review(orjson.dumps(body))
    assert caught.value.uid == body["request"]["uid"]
    assert caught.value.api_version == "admission.k8s.io/v1beta1"


@pytest.mark.parametrize("field, value, named", [
    ("operation", "PATCH", "request.operation"),
    ("kind", None, "request.kind"),
    ("object", "a pod", "request.object"),
])
def test_bad_request_fields_are_named(field, value, named):
    with pytest.raises(MalformedReview, match=named) as caught:
        parse_review(orjson.dumps(_review(**{field: value})))
    assert caught.value.uid == "705ab4f5-6393-11e8-b7cc-42010a800002"


def test_missing_uid_is_named_and_unanswerable():
    body = _review()
    del body["request"]["uid"]
    with pytest.raises(MalformedReview, match="request.uid") as caught:
        parse_review(orjson.dumps(body))
    assert caught.value.uid is None


# --- the response envelope ------------------------------------------------------------------------------
def test_allowed_without_patch_has_no_patch_type():
    answer = build_response("u-1")
    assert answer == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": {"uid": "u-1", "allowed": True}}


def test_patch_is_base64_json_with_patch_type():
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    response = build_response("u-2", patch=ops, warnings=["note"])["response"]
    assert response["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(response["patch"])) == ops
    assert response["warnings"] == ["note"]


def test_denial_carries_status_and_never_a_patch():
    response = build_response("u-3", allowed=False, message="bad annotation", code=422, reason="Invalid",
                              patch=[{"op": "add", "path": "/x", "value": 1}])["response"]
    assert response["allowed"] is False
    assert response["status"] == {"message": "bad annotation", "status": "Failure", "code": 422, "reason": "Invalid"}
    assert "patch" not in response and "patchType" not in response


def test_denial_defaults_to_forbidden():
    assert build_response("u", allowed=False, message="no")["response"]["status"]["code"] == 403


def test_warnings_are_single_line_and_bounded():
    response = build_response("u", warnings=["two\nlines", "x" * 1000])["response"]
    assert response["warnings"][0] == "two lines"
    assert len(response["warnings"][1]) == 256 and response["warnings"][1].endswith("...")


def test_response_echoes_the_requested_api_version():
    assert build_response("u", api_version="admission.k8s.io/v1beta1")["apiVersion"] == "admission.k8s.io/v1beta1"


# --- JSON Patch ----------------------------------------------------------------------------------------
def test_escape_order_matters():
    assert escape("kai.scheduler/subgroup-name") == "kai.scheduler~1subgroup-name"
    assert escape("a~/b") == "a~0~1b"
    assert pointer("metadata", "labels", "a/b") == "/metadata/labels/a~1b"
    assert pointer("spec", "containers", 0, "env", "-") == "/spec/containers/0/env/-"


def test_missing_map_is_created_whole():
    pod = {"metadata": {}}
    ops = set_entries(None, ["metadata", "labels"], {"kai.scheduler/subgroup-name": "worker-2"})
    assert ops == [{"op": "add", "path": "/metadata/labels", "value": {"kai.scheduler/subgroup-name": "worker-2"}}]
    assert jsonpatch.apply_patch(pod, ops)["metadata"]["labels"] == {"kai.scheduler/subgroup-name": "worker-2"}


def test_existing_map_gets_only_missing_or_different_keys():
    labels = {"app": "x", "kai.scheduler/subgroup-name": "old", "kai.scheduler/segment-index": "1"}
    ops = set_entries(labels, ["metadata", "labels"],
                      {"kai.scheduler/subgroup-name": "worker-1", "kai.scheduler/segment-index": "1"})
    assert ops == [{"op": "add", "path": "/metadata/labels/kai.scheduler~1subgroup-name", "value": "worker-1"}]
    patched = jsonpatch.apply_patch({"metadata": {"labels": labels}}, ops)["metadata"]["labels"]
    assert patched == {"app": "x", "kai.scheduler/subgroup-name": "worker-1", "kai.scheduler/segment-index": "1"}


def test_set_value_is_skipped_when_equal():
    assert set_value("tas-scheduler", ["spec", "schedulerName"], "tas-scheduler") == []
    assert set_value("default-scheduler", ["spec", "schedulerName"], "tas-scheduler") == [
        {"op": "add", "path": "/spec/schedulerName", "value": "tas-scheduler"}]


def test_env_is_created_then_appended_and_never_duplicated():
    container = {"name": "main"}
    variables = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "A", "value": "3"}]
    ops = append_env(container.get("env"), ["spec", "containers", 0, "env"], variables)
    assert ops == [{"op": "add", "path": "/spec/containers/0/env",
                    "value": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]
    pod = jsonpatch.apply_patch({"spec": {"containers": [container]}}, ops)
    assert append_env(pod["spec"]["containers"][0]["env"], ["spec", "containers", 0, "env"], variables) == []
    pod["spec"]["containers"][0]["env"] = [{"name": "B", "value": "user"}]
    ops = append_env(pod["spec"]["containers"][0]["env"], ["spec", "containers", 0, "env"], variables)
    assert ops == [{"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "A", "value": "1"}}]
    assert jsonpatch.apply_patch(pod, ops)["spec"]["containers"][0]["env"] == [
        {"name": "B", "value": "user"}, {"name": "A", "value": "1"}]


keys = st.text(alphabet=st.sampled_from("ab~/.-_"), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(existing=st.one_of(st.none(), st.dictionaries(keys, st.text(max_size=3), max_size=4)),
       wanted=st.dictionaries(keys, st.text(max_size=3), max_size=4))
def test_set_entries_applies_to_exactly_the_union_and_is_idempotent(existing, wanted):
    pod = {"metadata": {} if existing is None else {"labels": copy.deepcopy(existing)}}
    ops = set_entries(existing, ["metadata", "labels"], wanted)
    patched = jsonpatch.apply_patch(pod, ops)
    labels = patched["metadata"].get("labels", {})
    assert labels == {**(existing or {}), **wanted}
    assert set_entries(patched["metadata"].get("labels"), ["metadata", "labels"], wanted) == []
