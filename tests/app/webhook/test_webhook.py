"""POST /mutate end to end: AdmissionReview payloads as the API server sends them, the patch applied with
the `jsonpatch` library, the resulting pod checked (and validated against the Pod schema)."""
from __future__ import annotations

import copy
import json

import kubernetes_validate
import pytest
from fastapi.testclient import TestClient

from app.settings import Settings
from grouper import expand_pods
from topology.cluster import Cluster
from webhook_helpers import (
    PAYLOADS, Clock, StandInSettings, env_of, make_app, operations, owners, patched, payload, post, review_of,
    watched_kind,
)

SEGMENT_ENV = ("KAI_SEGMENT_INDEX", "KAI_SEGMENT_SIZE", "KAI_SEGMENT_RANK", "KAI_NUM_SEGMENTS")
PLACEMENT_ENV = {
    "KAI_TOPOLOGY_NAME": "metadata.annotations['placement.tas-extender.io/topology']",
    "KAI_TOPOLOGY_ZONE": "metadata.annotations['placement.tas-extender.io/zone']",
    "KAI_TOPOLOGY_BLOCK": "metadata.annotations['placement.tas-extender.io/block']",
    "KAI_TOPOLOGY_RACK": "metadata.annotations['placement.tas-extender.io/rack']",
    "KAI_TOPOLOGY_HOST": "metadata.annotations['placement.tas-extender.io/host']",
}
TF_GANG = "pg-tf-segments-7d1c0a52-2f55-4c1e-9a51-0b5f1e0c0001"


@pytest.fixture
def client() -> TestClient:
    app, _ = make_app()
    return TestClient(app)


def admit_ok(client: TestClient, body: dict) -> tuple[dict, dict]:
    """(response, patched pod) of an allowed review."""
    status, answer = post(client, body)
    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == body["request"]["uid"]
    assert response["allowed"] is True, response.get("status")
    return response, patched(body, response)


def deny(client: TestClient, body: dict) -> dict:
    status, answer = post(client, body)
    assert status == 200
    response = answer["response"]
    assert response["uid"] == body["request"]["uid"]
    assert response["allowed"] is False
    assert "patch" not in response and "patchType" not in response
    return response


def labels(pod: dict) -> dict:
    return pod["metadata"].get("labels") or {}


def annotations(pod: dict) -> dict:
    return pod["metadata"].get("annotations") or {}


def validate_pod(pod: dict) -> None:
    pod = copy.deepcopy(pod)
    pod["metadata"].setdefault("name", "generated")
    kubernetes_validate.validate(pod, "1.30", strict=True)


def worker_review(workload: dict, pod_name: str, seed: str = "case") -> dict:
    pod = next(p for p in expand_pods(workload) if p["metadata"]["name"] == pod_name)
    return review_of(pod, workload["kind"], seed=seed)


# --- the seed examples -------------------------------------------------------------------------------
def test_tfjob_worker_gets_segment_labels_and_env(client):
    body = payload("tfjob-worker-5")
    response, pod = admit_ok(client, body)
    assert "warnings" not in response
    assert labels(pod)["kai.scheduler/subgroup-name"] == "worker-1"
    assert labels(pod)["kai.scheduler/segment-index"] == "1"
    assert labels(pod)["training.kubeflow.org/replica-index"] == "5"        # the controller's labels stay
    assert annotations(pod)["pod-group-name"] == TF_GANG
    assert annotations(pod)["kai.scheduler/segment-size"] == "4"
    env = env_of(pod["spec"]["containers"][0])
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "2"                                 # the user's env stays first
    assert pod["spec"]["containers"][0]["env"][0]["name"] == "TF_CPP_MIN_LOG_LEVEL"
    assert {k: env[k] for k in SEGMENT_ENV} == {
        "KAI_SEGMENT_INDEX": "1", "KAI_SEGMENT_SIZE": "4", "KAI_SEGMENT_RANK": "1", "KAI_NUM_SEGMENTS": "4"}
    assert {k: env[k] for k in PLACEMENT_ENV} == PLACEMENT_ENV
    assert pod["spec"]["schedulerName"] == "default-scheduler"               # the setting is off
    validate_pod(pod)


def test_label_keys_are_escaped_in_patch_paths(client):
    response, _ = admit_ok(client, payload("tfjob-worker-5"))
    paths = [op["path"] for op in operations(response)]
    assert "/metadata/labels/kai.scheduler~1subgroup-name" in paths
    assert "/metadata/labels/kai.scheduler~1segment-index" in paths
    assert all("kai.scheduler/" not in path for path in paths)


def test_all_sixteen_tfjob_workers_fill_four_segments_of_four(client):
    tfjob = owners()["tf-segments"]
    seen = {}
    for pod in expand_pods(tfjob):
        if pod["metadata"]["labels"]["training.kubeflow.org/replica-type"] != "worker":
            continue
        _, patched_pod = admit_ok(client, review_of(pod, "TFJob", seed=pod["metadata"]["name"]))
        env = env_of(patched_pod["spec"]["containers"][0])
        index = int(pod["metadata"]["labels"]["training.kubeflow.org/replica-index"])
        segment, rank = int(env["KAI_SEGMENT_INDEX"]), int(env["KAI_SEGMENT_RANK"])
        assert segment * int(env["KAI_SEGMENT_SIZE"]) + rank == index
        assert labels(patched_pod)["kai.scheduler/subgroup-name"] == f"worker-{segment}"
        assert labels(patched_pod)["kai.scheduler/segment-index"] == str(segment)
        assert env["KAI_NUM_SEGMENTS"] == "4"
        seen[(segment, rank)] = index
    assert sorted(seen) == [(s, r) for s in range(4) for r in range(4)]


def test_unsegmented_role_gets_subgroup_and_topology_but_no_segment(client):
    body = payload("tfjob-chief-0")
    assert "annotations" not in body["request"]["object"]["metadata"]
    response, pod = admit_ok(client, body)
    assert {"op": "add", "path": "/metadata/annotations", "value": {"pod-group-name": TF_GANG}} in operations(response)
    assert labels(pod)["kai.scheduler/subgroup-name"] == "chief"
    assert "kai.scheduler/segment-index" not in labels(pod)
    env = env_of(pod["spec"]["containers"][0])
    assert not set(SEGMENT_ENV) & set(env)
    assert {k: env[k] for k in PLACEMENT_ENV} == PLACEMENT_ENV
    validate_pod(pod)


def test_lws_worker_index_starts_after_the_leader(client):
    body = payload("lws-group-1-worker-6")          # worker-index 6 = the 6th worker = segment 1, rank 1
    _, pod = admit_ok(client, body)
    assert labels(pod)["kai.scheduler/subgroup-name"] == "worker-1"
    assert labels(pod)["kai.scheduler/segment-index"] == "1"
    assert annotations(pod)["pod-group-name"] == "pg-vllm-1-0b6a2d7e-3c1f-49a1-b2f0-6e7d8c9a0003"
    env = env_of(pod["spec"]["containers"][0])
    assert (env["KAI_SEGMENT_INDEX"], env["KAI_SEGMENT_RANK"], env["KAI_SEGMENT_SIZE"], env["KAI_NUM_SEGMENTS"]) == \
        ("1", "1", "4", "2")
    assert env["KAI_TOPOLOGY_RACK"] == PLACEMENT_ENV["KAI_TOPOLOGY_RACK"]      # topology found from the labels
    validate_pod(pod)


def test_lws_first_worker_is_segment_zero_rank_one_after_the_leader(client):
    _, pod = admit_ok(client, worker_review(owners()["vllm"], "vllm-0-1"))
    env = env_of(pod["spec"]["containers"][0])
    assert (env["KAI_SEGMENT_INDEX"], env["KAI_SEGMENT_RANK"], env["KAI_SEGMENT_SIZE"]) == ("0", "1", "4")
    assert annotations(pod)["pod-group-name"].startswith("pg-vllm-0-")


def test_lws_leader_is_in_subgroup_zero_as_upstream_labels_it(client):
    _, pod = admit_ok(client, payload("lws-group-0-leader"))
    assert labels(pod)["kai.scheduler/subgroup-name"] == "worker-0"
    assert labels(pod)["kai.scheduler/segment-index"] == "0"
    env = env_of(pod["spec"]["containers"][0])
    assert (env["KAI_SEGMENT_INDEX"], env["KAI_SEGMENT_RANK"]) == ("0", "0")


def _lws_without_leader_template() -> dict:
    """The common LWS shape: segment annotations on workerTemplate only; the leader uses that template."""
    lws = owners()["vllm"]
    template = lws["spec"]["leaderWorkerTemplate"]
    del template["leaderTemplate"], template["subGroupPolicy"]
    template["size"] = 4
    template["workerTemplate"].setdefault("metadata", {})["annotations"] = {
        "kai.scheduler/topology": "default", "kai.scheduler/segment-size": "2"}
    return lws


@pytest.mark.parametrize("pod_name", ["vllm-0", "vllm-0-1", "vllm-1-3"])
def test_lws_segment_annotations_on_the_worker_template_admit_every_pod(pod_name):
    lws = _lws_without_leader_template()
    app, _ = make_app([lws])
    _, pod = admit_ok(TestClient(app), worker_review(lws, pod_name))
    assert annotations(pod)["pod-group-name"].startswith("pg-vllm-")


def test_segment_size_above_the_replicas_is_admitted_with_a_warning():
    tfjob = tfjob_with({"kai.scheduler/segment-size": "17"})
    app, _ = make_app([tfjob])
    response, pod = admit_ok(TestClient(app), worker_review(tfjob, "tf-segments-worker-5"))
    assert labels(pod)["kai.scheduler/segment-index"] == "0"
    assert any("segment-size=17" in w and "one segment of 16" in w for w in response.get("warnings", []))


def test_existing_annotations_with_slash_and_tilde_survive(client):
    body = payload("lws-group-1-worker-6")
    before = annotations(body["request"]["object"])
    assert before["prometheus.io/scrape"] == "true" and before["example.com/a~b"] == "tilde"
    response, pod = admit_ok(client, body)
    assert {k: annotations(pod)[k] for k in before} == before
    assert set(annotations(pod)) == set(before) | {"pod-group-name"}
    assert all(op["path"] != "/metadata/annotations" for op in operations(response))   # map not replaced


def test_elastic_segment_past_the_minimum_and_init_containers(client):
    body = payload("pytorch-elastic-worker-17")
    _, pod = admit_ok(client, body)
    assert labels(pod)["kai.scheduler/subgroup-name"] == "worker-4"
    for container in pod["spec"]["initContainers"] + pod["spec"]["containers"]:
        env = env_of(container)
        assert (env["KAI_SEGMENT_INDEX"], env["KAI_SEGMENT_RANK"], env["KAI_NUM_SEGMENTS"]) == ("4", "1", "5")
        assert env["KAI_TOPOLOGY_BLOCK"] == PLACEMENT_ENV["KAI_TOPOLOGY_BLOCK"]
    validate_pod(pod)


def test_generate_name_pod_uses_the_request_namespace(client):
    body = payload("job-generate-name-index-3")
    metadata = body["request"]["object"]["metadata"]
    assert "name" not in metadata and "namespace" not in metadata
    _, pod = admit_ok(client, body)
    assert annotations(pod)["pod-group-name"] == "pg-sweep-1e2d3c4b-5a69-4788-9a0b-c1d2e3f40004"
    assert labels(pod)["kai.scheduler/subgroup-name"] == "job-0"
    env = env_of(pod["spec"]["containers"][0])
    assert (env["KAI_SEGMENT_INDEX"], env["KAI_SEGMENT_RANK"], env["KAI_NUM_SEGMENTS"]) == ("0", "3", "2")
    assert "namespace" not in pod["metadata"]                  # the patch does not invent metadata


def test_owner_in_another_namespace_is_not_used():
    app, _ = make_app()
    body = payload("job-generate-name-index-3")
    body["request"]["namespace"] = "elsewhere"      # no Job "sweep" there: the cache says the owner is unknown
    response = deny(TestClient(app), body)
    assert response["status"]["code"] == 503 and "Job elsewhere/sweep" in response["status"]["message"]


def test_pod_without_labels_or_env_gets_both_maps_and_env_created(client):
    body = payload("job-generate-name-index-3")
    metadata = body["request"]["object"]["metadata"]
    metadata.pop("labels")             # the index only in the annotation, as older Job controllers set it
    container = body["request"]["object"]["spec"]["containers"][0]
    assert "env" not in container
    response, pod = admit_ok(client, body)
    ops = operations(response)
    assert ops[0] == {"op": "add", "path": "/metadata/labels",
                      "value": {"kai.scheduler/subgroup-name": "job-0", "kai.scheduler/segment-index": "0"}}
    env_ops = [op for op in ops if op["path"].startswith("/spec/containers/0/env")]
    assert [op["path"] for op in env_ops] == ["/spec/containers/0/env"]
    assert [var["name"] for var in pod["spec"]["containers"][0]["env"]] == list(SEGMENT_ENV) + list(PLACEMENT_ENV)
    validate_pod(pod)


def test_pod_of_another_workload_is_allowed_unchanged(client):
    response, pod = admit_ok(client, payload("deployment-pod"))
    assert response == {"uid": payload("deployment-pod")["request"]["uid"], "allowed": True}
    assert pod == payload("deployment-pod")["request"]["object"]


def test_job_that_does_not_opt_in_is_unchanged(client):
    job = owners()["sweep"]
    job["metadata"]["annotations"] = {}
    job["spec"]["template"]["metadata"]["annotations"] = {}
    app, _ = make_app([job])
    response, _ = admit_ok(TestClient(app), review_of(expand_pods(job)[0], "Job"))
    assert "patch" not in response and "warnings" not in response


def test_explicit_podgroup_pod_keeps_its_labels_and_gets_topology_env():
    podgroup = {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": "pd", "namespace": "serving"},
        "spec": {"topologyConstraint": {"topology": "default", "requiredTopologyLevel": "zone"},
                 "subGroups": [{"name": "decode", "minMember": 2}, {"name": "prefill", "minMember": 2}]}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "pd-decode-0", "namespace": "serving", "labels": {"kai.scheduler/subgroup-name": "decode"},
        "annotations": {"pod-group-name": "pd"}}, "spec": {"containers": [{"name": "main", "image": "vllm"}]}}
    app, _ = make_app([podgroup])
    response, patched_pod = admit_ok(TestClient(app), review_of(pod, "Job"))
    assert "warnings" not in response       # "1 of minMember 2 pods" is not this pod's business
    assert all(op["path"].startswith("/spec/containers/0/env") for op in operations(response))
    assert env_of(patched_pod["spec"]["containers"][0]) == PLACEMENT_ENV


def test_podgroup_pod_naming_no_subgroup_is_denied():
    podgroup = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                "metadata": {"name": "pd", "namespace": "serving"},
                "spec": {"subGroups": [{"name": "decode", "minMember": 1}, {"name": "prefill", "minMember": 1}]}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "p", "namespace": "serving", "labels": {"kai.scheduler/subgroup-name": "decoder"},
        "annotations": {"pod-group-name": "pd"}}, "spec": {"containers": [{"name": "main", "image": "x"}]}}
    app, _ = make_app([podgroup])
    message = deny(TestClient(app), review_of(pod, "Job"))["status"]["message"]
    assert "kai.scheduler/subgroup-name='decoder'" in message and "decode, prefill" in message


# --- reinvocation and dryRun ------------------------------------------------------------------------
@pytest.mark.parametrize("name", PAYLOADS)
def test_second_pass_over_the_patched_pod_adds_nothing(client, name):
    body = payload(name)
    _, once = admit_ok(client, body)
    again = copy.deepcopy(body)
    again["request"]["object"] = once
    response, twice = admit_ok(client, again)
    assert "patch" not in response and "patchType" not in response
    assert twice == once
    for container in once["spec"].get("containers", []) + once["spec"].get("initContainers", []):
        names = [var["name"] for var in container.get("env") or []]
        assert len(names) == len(set(names))


@pytest.mark.parametrize("name", PAYLOADS)
def test_dry_run_gets_the_same_answer(client, name):
    body = payload(name)
    dry = copy.deepcopy(body)
    dry["request"]["dryRun"] = True
    assert post(client, dry) == post(client, body)


def test_dry_run_does_not_start_the_owner_grace_clock():
    clock = Clock()
    app, state = make_app([], clock=clock)
    client = TestClient(app)
    body = payload("tfjob-worker-5")
    dry = copy.deepcopy(body)
    dry["request"]["dryRun"] = True
    deny(client, dry)
    clock.now += 60
    assert deny(client, dry)["status"]["code"] == 503        # a dry run recorded nothing
    deny(client, body)
    clock.now += 60
    assert post(client, dry)[1]["response"]["allowed"] is True


# --- scheduler name -------------------------------------------------------------------------------------
def test_scheduler_name_is_set_when_enabled():
    app, _ = make_app(settings=StandInSettings(set_scheduler_name=True, scheduler_name="tas-scheduler"))
    client = TestClient(app)
    _, pod = admit_ok(client, payload("tfjob-worker-5"))
    assert pod["spec"]["schedulerName"] == "tas-scheduler"
    body = payload("tfjob-worker-5")
    body["request"]["object"]["spec"]["schedulerName"] = "volcano"
    response, pod = admit_ok(client, body)
    assert pod["spec"]["schedulerName"] == "volcano"
    assert any("spec.schedulerName='volcano' kept" in w for w in response["warnings"])


def test_scheduler_name_left_alone_without_topology():
    job = owners()["sweep"]
    job["metadata"]["annotations"] = {"kai.scheduler/batch-min-member": "4"}      # a gang, no topology
    job["spec"]["template"]["metadata"]["annotations"] = {}
    app, _ = make_app([job], settings=StandInSettings(set_scheduler_name=True))
    _, pod = admit_ok(TestClient(app), review_of(expand_pods(job)[0], "Job"))
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert labels(pod)["kai.scheduler/subgroup-name"] == "job"


# --- what the plan cannot see --------------------------------------------------------------------------
def test_devices_claimed_through_dra_are_admitted_without_a_warning(client):
    """A gang pod asking for devices through spec.resourceClaims (DRA): the plan counts them (templates,
    request selectors, matchAttribute constraints, named and shared claims: docs/dra.md), so admission no
    longer warns that it does not."""
    body = payload("tfjob-worker-5")
    body["request"]["object"]["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "x"}]
    response, pod = admit_ok(client, body)
    assert not any("spec.resourceClaims" in w for w in response.get("warnings", []))
    assert labels(pod)["kai.scheduler/segment-index"]                 # grouped and stamped as any gang pod


def test_a_hard_spread_over_zones_is_admitted_with_a_warning(client):
    """DoNotSchedule on the zone key spreads the gang over every zone; the plan keeps a gang together and
    models the hostname key only."""
    body = payload("tfjob-worker-5")
    pod = body["request"]["object"]
    labels_ = pod["metadata"]["labels"]
    spread = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
              "labelSelector": {"matchLabels": dict(labels_)}}
    pod["spec"]["topologySpreadConstraints"] = [spread, dict(spread, topologyKey="kubernetes.io/hostname"),
                                                dict(spread, whenUnsatisfiable="ScheduleAnyway")]
    response, _ = admit_ok(client, body)
    notes = [w for w in response["warnings"] if "topologySpreadConstraints" in w]
    assert len(notes) == 1 and "DoNotSchedule on topology.kubernetes.io/zone" in notes[0], notes


def test_a_staleness_grace_period_that_is_not_a_duration_is_admitted_with_a_warning(client):
    """KAI skips an invalid kai.scheduler/staleness-grace-period and logs it; the user is told at admission."""
    body = payload("tfjob-worker-5")
    body["request"]["object"]["metadata"].setdefault("annotations", {})["kai.scheduler/staleness-grace-period"] = "1 min"
    response, pod = admit_ok(client, body)
    notes = [w for w in response["warnings"] if "staleness-grace-period" in w]
    assert len(notes) == 1 and "'1 min' is not a duration; expected a Go duration such as 90s" in notes[0], notes
    assert notes[0].startswith("pod research/tf-segments-worker-5 annotation kai.scheduler/staleness-grace-period")
    assert labels(pod)["kai.scheduler/segment-index"]                 # grouped and stamped all the same


# --- values the user already set ---------------------------------------------------------------------
def test_user_env_of_the_same_name_is_kept_with_a_warning(client):
    body = payload("tfjob-worker-5")
    body["request"]["object"]["spec"]["containers"][0]["env"].append({"name": "KAI_SEGMENT_INDEX", "value": "9"})
    response, pod = admit_ok(client, body)
    env = pod["spec"]["containers"][0]["env"]
    assert [var["value"] for var in env if var["name"] == "KAI_SEGMENT_INDEX"] == ["9"]
    assert any("already sets KAI_SEGMENT_INDEX" in w for w in response["warnings"])


def test_stale_subgroup_label_is_replaced_with_a_warning(client):
    body = payload("tfjob-worker-5")
    body["request"]["object"]["metadata"]["labels"]["kai.scheduler/subgroup-name"] = "worker-3"
    response, pod = admit_ok(client, body)
    assert labels(pod)["kai.scheduler/subgroup-name"] == "worker-1"
    assert any("kai.scheduler/subgroup-name='worker-3' replaced by 'worker-1'" in w for w in response["warnings"])


# --- denials: invalid segment annotations ----------------------------------------------------------------
def tfjob_with(worker_annotations: dict | None = None, root_annotations: dict | None = None) -> dict:
    tfjob = owners()["tf-segments"]
    worker = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    worker.update(worker_annotations or {})
    tfjob["metadata"]["annotations"].update(root_annotations or {})
    return tfjob


@pytest.mark.parametrize("annotations_, expected", [
    ({"kai.scheduler/segment-size": "four"},
     ["kai.scheduler/segment-size='four'", "integer >= 1"]),
    ({"kai.scheduler/segment-size": "0"}, ["kai.scheduler/segment-size='0'", "integer >= 1"]),
    ({"kai.scheduler/segment-size": "-4"}, ["kai.scheduler/segment-size='-4'", "integer >= 1"]),
    ({"kai.scheduler/segment-topology-required-placement": "row"},
     ["kai.scheduler/segment-topology-required-placement", "'row'", "valid levels", "rack"]),
])
def test_invalid_segment_annotation_is_denied(annotations_, expected):
    tfjob = tfjob_with(annotations_)
    app, _ = make_app([tfjob])
    response = deny(TestClient(app), worker_review(tfjob, "tf-segments-worker-5"))
    assert response["status"]["code"] == 422 and response["status"]["reason"] == "Invalid"
    for text in expected:
        assert text in response["status"]["message"]
    assert "TFJob research/tf-segments" in response["status"]["message"]


def test_segment_level_coarser_than_the_job_level_is_denied():
    tfjob = tfjob_with({"kai.scheduler/segment-topology-required-placement": "zone"},
                       {"kai.scheduler/topology-required-placement": "rack"})
    app, _ = make_app([tfjob])
    message = deny(TestClient(app), worker_review(tfjob, "tf-segments-worker-5"))["status"]["message"]
    assert "kai.scheduler/segment-topology-required-placement" in message and "'zone'" in message
    assert "coarser" in message and "rack" in message


def test_unknown_topology_is_denied():
    tfjob = tfjob_with(root_annotations={"kai.scheduler/topology": "nope"})
    app, _ = make_app([tfjob])
    message = deny(TestClient(app), worker_review(tfjob, "tf-segments-worker-5"))["status"]["message"]
    assert "kai.scheduler/topology='nope'" in message and "default" in message


def test_every_pod_of_an_invalid_workload_is_denied_even_unsegmented_roles():
    tfjob = tfjob_with({"kai.scheduler/segment-size": "0"})
    app, _ = make_app([tfjob])
    deny(TestClient(app), worker_review(tfjob, "tf-segments-chief-0"))


def test_segments_on_a_non_indexed_job_are_denied():
    job = owners()["sweep"]
    job["spec"].pop("completionMode")
    app, _ = make_app([job])
    message = deny(TestClient(app), review_of(expand_pods(job)[0], "Job"))["status"]["message"]
    assert "kai.scheduler/segment-size='4'" in message and "kai.scheduler/pod-index-label" in message


def test_non_indexed_job_with_pod_index_label_is_accepted():
    job = owners()["sweep"]
    job["spec"].pop("completionMode")
    job["spec"]["template"]["metadata"]["annotations"]["kai.scheduler/pod-index-label"] = "example.com/index"
    app, _ = make_app([job])
    pod = expand_pods(job)[6]
    assert pod["metadata"]["labels"]["example.com/index"] == "6"
    _, patched_pod = admit_ok(TestClient(app), review_of(pod, "Job"))
    assert labels(patched_pod)["kai.scheduler/segment-index"] == "1"


def raycluster_pod(template_annotations: dict) -> dict:
    """A pod of a kind the service does not watch (KubeRay is not among the built-in kinds)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "ray-worker-1", "namespace": "serving",
        "labels": {"ray.io/cluster": "ray", "example.com/index": "1"},
        "annotations": {"kai.scheduler/topology": "default", **template_annotations},
        "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "ray", "uid": "u",
                             "controller": True}]},
        "spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.9.0"}]}}


def test_segments_on_an_unwatched_kind_without_index_label_are_denied(client):
    body = review_of(raycluster_pod({"kai.scheduler/segment-size": "2"}), "ReplicaSet")
    message = deny(client, body)["status"]["message"]
    assert "RayCluster serving/ray" in message and "kai.scheduler/segment-size='2'" in message
    assert "kai.scheduler/pod-index-label" in message and "LeaderWorkerSet" in message


def test_unwatched_kind_with_index_label_is_allowed_with_a_note_naming_extra_kinds(client):
    pod = raycluster_pod({"kai.scheduler/segment-size": "2", "kai.scheduler/pod-index-label": "example.com/index"})
    response, _ = admit_ok(client, review_of(pod, "ReplicaSet"))
    assert "patch" not in response
    assert "RayCluster is not watched" in response["warnings"][0]
    assert "--extra-kinds <plural>.<group>/<version>=RayCluster" in response["warnings"][0]


def test_a_kind_named_in_extra_kinds_is_waited_for_like_a_built_in_one():
    settings = Settings(extra_kinds="rayclusters.ray.io/v1=RayCluster")
    app, _ = make_app([], settings=settings)
    pod = raycluster_pod({"kai.scheduler/segment-size": "2", "kai.scheduler/pod-index-label": "example.com/index"})
    status = deny(TestClient(app), review_of(pod, "ReplicaSet"))["status"]
    assert status["code"] == 503 and "RayCluster serving/ray" in status["message"]


def statefulset(template_annotations: dict, root_annotations: dict | None = None) -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "cache", "namespace": "serving", "uid": "uid-cache", "resourceVersion": "1",
                         "annotations": {"kai.scheduler/topology": "default", **(root_annotations or {})}},
            "spec": {"replicas": 4, "serviceName": "cache", "selector": {"matchLabels": {"app": "cache"}},
                     "template": {"metadata": {"labels": {"app": "cache"}, "annotations": template_annotations},
                                  "spec": {"containers": [{"name": "cache", "image": "redis:7"}]}}}}


def statefulset_pod(workload: dict, ordinal: int) -> dict:
    """The pod the StatefulSet controller creates: name-<ordinal>, the pod-index label, a controller ref."""
    template = workload["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"cache-{ordinal}", "namespace": "serving",
        "labels": {**template["metadata"]["labels"], "apps.kubernetes.io/pod-index": str(ordinal),
                   "statefulset.kubernetes.io/pod-name": f"cache-{ordinal}"},
        "annotations": dict(template["metadata"]["annotations"]),
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "cache",
                             "uid": "uid-cache", "controller": True, "blockOwnerDeletion": True}]},
        "spec": copy.deepcopy(template["spec"])}


def statefulset_review(pod: dict) -> dict:
    body = review_of(pod, "StatefulSet")
    body["request"]["userInfo"]["username"] = "system:serviceaccount:kube-system:statefulset-controller"
    return body


SEGMENTED = {"kai.scheduler/pod-index-label": "apps.kubernetes.io/pod-index", "kai.scheduler/segment-size": "2",
             "kai.scheduler/segment-topology-required-placement": "rack"}


def test_statefulset_with_pod_index_label_gets_segments():
    workload = statefulset(SEGMENTED)
    app, _ = make_app([workload])
    _, pod = admit_ok(TestClient(app), statefulset_review(statefulset_pod(workload, 3)))
    assert labels(pod)["kai.scheduler/segment-index"] == "1"
    assert annotations(pod)["pod-group-name"] == "pg-cache-uid-cache"
    env = env_of(pod["spec"]["containers"][0])
    assert (env["KAI_SEGMENT_INDEX"], env["KAI_SEGMENT_SIZE"], env["KAI_SEGMENT_RANK"], env["KAI_NUM_SEGMENTS"]) \
        == ("1", "2", "1", "2")
    validate_pod(pod)


def test_segments_on_a_statefulset_without_index_label_are_denied():
    workload = statefulset({"kai.scheduler/segment-size": "2"})
    app, _ = make_app([workload])
    message = deny(TestClient(app), statefulset_review(statefulset_pod(workload, 1)))["status"]["message"]
    assert "StatefulSet serving/cache" in message and "kai.scheduler/segment-size='2'" in message
    assert "kai.scheduler/pod-index-label" in message


def test_statefulset_not_cached_yet_waits_only_when_its_pods_opt_in():
    app, _ = make_app([])
    client = TestClient(app)
    status = deny(client, statefulset_review(statefulset_pod(statefulset(SEGMENTED), 0)))["status"]
    assert status["code"] == 503 and "StatefulSet serving/cache" in status["message"]
    plain = statefulset_pod(statefulset({}), 0)          # e.g. a database: never a gang from its pods alone
    plain["metadata"]["annotations"] = {}
    body = statefulset_review(plain)
    response, pod = admit_ok(client, body)
    assert pod == body["request"]["object"] and "warnings" not in response


# --- warnings ------------------------------------------------------------------------------------------------
def test_segment_annotation_without_topology_is_allowed_with_a_warning():
    """A segment size alone (no level) names no topology: the segments are ignored, with a warning."""
    tfjob = tfjob_with()
    del tfjob["metadata"]["annotations"]["kai.scheduler/topology"]
    del tfjob["metadata"]["annotations"]["kai.scheduler/topology-required-placement"]
    for key in [k for k in _worker_template(tfjob)["metadata"]["annotations"] if "segment-topology" in k]:
        del _worker_template(tfjob)["metadata"]["annotations"][key]
    app, _ = make_app([tfjob])
    response, pod = admit_ok(TestClient(app), worker_review(tfjob, "tf-segments-worker-5"))
    assert any("kai.scheduler/segment-size" in w and "ignored" in w and "kai.scheduler/topology" in w
               for w in response["warnings"]), response
    assert labels(pod)["kai.scheduler/subgroup-name"] == "worker"     # one unsegmented worker group
    assert "kai.scheduler/segment-index" not in labels(pod)
    env = env_of(pod["spec"]["containers"][0])
    assert not set(SEGMENT_ENV) & set(env) and not set(PLACEMENT_ENV) & set(env)


def test_a_segment_level_without_topology_resolves_in_the_one_topology_with_it_and_warns():
    tfjob = tfjob_with()
    del tfjob["metadata"]["annotations"]["kai.scheduler/topology"]
    del tfjob["metadata"]["annotations"]["kai.scheduler/topology-required-placement"]
    app, _ = make_app([tfjob])
    response, pod = admit_ok(TestClient(app), worker_review(tfjob, "tf-segments-worker-5"))
    assert any("no kai.scheduler/topology" in w and "resolved in topology 'default'" in w
               for w in response["warnings"]), response
    assert "kai.scheduler/segment-index" in labels(pod)


def test_a_required_level_no_topology_has_is_warned_and_never_dropped():
    tfjob = tfjob_with()
    del tfjob["metadata"]["annotations"]["kai.scheduler/topology"]
    tfjob["metadata"]["annotations"]["kai.scheduler/topology-required-placement"] = "galaxy"
    app, _ = make_app([tfjob])
    response, pod = admit_ok(TestClient(app), worker_review(tfjob, "tf-segments-worker-5"))
    assert any("topology-required-placement='galaxy'" in w and "is a required level without" in w
               for w in response.get("warnings", [])), response


def _worker_template(tfjob):
    return tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]


def test_bare_pod_with_topology_annotations_gets_a_note(client):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "solo", "annotations": {"kai.scheduler/topology": "default"}},
        "spec": {"containers": [{"name": "main", "image": "x"}]}}
    response, _ = admit_ok(client, review_of(pod, "Job", namespace="research"))
    assert "patch" not in response
    assert response["warnings"] == [
        "kai.scheduler/topology ignored: it has no owner, so the pod is not part of a placed gang"]


# --- owner not in the cache yet -----------------------------------------------------------------------------
def test_owner_missing_is_denied_for_the_grace_period_then_allowed_with_a_warning():
    clock = Clock()
    app, state = make_app([], clock=clock)
    client = TestClient(app)
    body = payload("tfjob-worker-5")
    status = deny(client, body)["status"]
    assert status["code"] == 503 and "TFJob research/tf-segments" in status["message"]
    assert "retry" in status["message"]
    clock.now += 29
    deny(client, body)
    clock.now += 2
    response, pod = admit_ok(client, body)
    assert pod == body["request"]["object"]
    assert "TFJob research/tf-segments not seen by the webhook for 31s" in response["warnings"][0]


def test_owner_arriving_within_the_grace_period_gets_the_full_patch():
    clock = Clock()
    app, state = make_app([], clock=clock)
    client = TestClient(app)
    body = payload("tfjob-worker-5")
    deny(client, body)
    clock.now += 1
    tfjob = owners()["tf-segments"]
    state.objects.apply(watched_kind(tfjob), "ADDED", tfjob)
    _, pod = admit_ok(client, body)
    assert labels(pod)["kai.scheduler/segment-index"] == "1"


# --- protocol errors ---------------------------------------------------------------------------------------
def test_not_json_is_a_400(client):
    status, answer = post(client, b"{oops")
    assert status == 400
    assert answer["response"]["allowed"] is False and "not JSON" in answer["response"]["status"]["message"]


def test_review_without_uid_is_a_400(client):
    body = payload("tfjob-worker-5")
    del body["request"]["uid"]
    status, answer = post(client, body)
    assert status == 400 and "request.uid" in answer["response"]["status"]["message"]


def test_malformed_review_with_a_uid_is_answered_for_the_api_server(client):
    body = payload("tfjob-worker-5")
    body["request"]["operation"] = "POST"
    status, answer = post(client, body)
    assert status == 200
    response = answer["response"]
    assert response["uid"] == body["request"]["uid"] and response["allowed"] is False
    assert response["status"]["code"] == 400 and "request.operation" in response["status"]["message"]


def test_v1beta1_review_is_answered_in_v1beta1_with_how_to_fix(client):
    body = payload("tfjob-worker-5")
    body["apiVersion"] = "admission.k8s.io/v1beta1"
    status, answer = post(client, body)
    assert status == 200 and answer["apiVersion"] == "admission.k8s.io/v1beta1"
    assert "admissionReviewVersions: [v1]" in answer["response"]["status"]["message"]


@pytest.mark.parametrize("change", [
    {"operation": "UPDATE"},
    {"kind": {"group": "apps", "version": "v1", "kind": "Deployment"}},
    {"subResource": "ephemeralcontainers"},
])
def test_anything_but_a_pod_create_is_allowed_unchanged(client, change):
    body = payload("tfjob-worker-5")
    body["request"].update(change)
    response, _ = admit_ok(client, body)
    assert response == {"uid": body["request"]["uid"], "allowed": True}


def test_create_without_object_is_denied(client):
    body = payload("tfjob-worker-5")
    body["request"]["object"] = None
    assert deny(client, body)["status"]["code"] == 400


@pytest.mark.parametrize("path, value, named", [
    (("metadata",), "x", "request.object.metadata"),
    (("metadata", "labels"), ["a"], "request.object.metadata.labels"),
    (("spec", "containers"), {"name": "c"}, "request.object.spec.containers"),
    (("spec", "containers", 0, "env"), {"A": "1"}, "request.object.spec.containers[].env"),
])
def test_pod_of_the_wrong_shape_is_refused_with_the_field(client, path, value, named):
    body = payload("tfjob-worker-5")
    target = body["request"]["object"]
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    status = deny(client, body)["status"]
    assert status["code"] == 400 and status["message"].startswith(named)


def test_unexpected_error_is_a_500_not_a_crash(client, monkeypatch):
    import app.webhook.admit as admit_module

    def broken(*args, **kwargs):
        raise RuntimeError("boom")
    monkeypatch.setattr(admit_module, "identify_pod", broken)
    status, answer = post(client, payload("tfjob-worker-5"))
    assert status == 500 and answer["response"]["allowed"] is False
    status, _ = post(client, payload("deployment-pod"))          # the next request is served
    assert status == 200


# --- the real service ----------------------------------------------------------------------------------------
def test_mutate_is_served_by_the_real_app():
    server = pytest.importorskip("app.server")
    from app.settings import Settings
    from topology.demo import demo_objects
    app = server.create_app(Settings(), objects=demo_objects() + list(owners().values()))
    with TestClient(app) as client:
        body = payload("tfjob-worker-5")
        response, pod = admit_ok(client, body)
        assert labels(pod)["kai.scheduler/segment-index"] == "1"
        assert env_of(pod["spec"]["containers"][0])["KAI_TOPOLOGY_RACK"] == PLACEMENT_ENV["KAI_TOPOLOGY_RACK"]
        assert json.loads(client.get("/openapi.json").text)["paths"]["/mutate"]["post"]


# --- the per-owner tree cache ------------------------------------------------------------------------------
def test_an_updated_owner_is_regrouped_not_served_from_the_cache():
    tfjob = owners()["tf-segments"]
    app, state = make_app([tfjob])
    client = TestClient(app)
    body = payload("tfjob-worker-5")
    _, pod = admit_ok(client, body)
    assert env_of(pod["spec"]["containers"][0])["KAI_SEGMENT_SIZE"] == "4"
    resized = tfjob_with({"kai.scheduler/segment-size": "8"})
    state.objects.apply(watched_kind(resized), "MODIFIED", resized)
    _, pod = admit_ok(client, body)
    env = env_of(pod["spec"]["containers"][0])
    assert (env["KAI_SEGMENT_SIZE"], env["KAI_SEGMENT_INDEX"], env["KAI_SEGMENT_RANK"]) == ("8", "0", "5")
    broken = tfjob_with({"kai.scheduler/segment-size": "x"})
    state.objects.apply(watched_kind(broken), "MODIFIED", broken)
    for _ in range(2):                                   # the refusal is cached as a refusal
        assert "segment-size='x'" in deny(client, body)["status"]["message"]


def test_new_topologies_are_used_at_once():
    tfjob = owners()["tf-segments"]
    app, state = make_app([tfjob])
    client = TestClient(app)
    admit_ok(client, payload("tfjob-worker-5"))
    state.cluster = Cluster(state.cluster.nodes)                        # every Topology deleted
    message = deny(client, payload("tfjob-worker-5"))["status"]["message"]
    assert "kai.scheduler/topology='default'" in message and "none defined" in message


def test_pod_naming_a_podgroup_not_seen_yet_is_allowed_with_a_warning(client):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "pd-0", "labels": {"kai.scheduler/subgroup-name": "decode"}, "annotations": {"pod-group-name": "pd"}},
        "spec": {"containers": [{"name": "main", "image": "x"}]}}
    response, _ = admit_ok(client, review_of(pod, "Job", namespace="serving"))
    assert "patch" not in response
    assert response["warnings"] == ["PodGroup serving/pd not seen by the webhook yet; pod admitted without the "
                                    "KAI_TOPOLOGY_* env vars"]


# --- the other supported kinds ------------------------------------------------------------------------------
def kubeflow_job(kind: str, api_version: str, specs_field: str, head: str) -> dict:
    template = {"spec": {"containers": [{"name": "main", "image": "trainer"}]}}
    return {
        "apiVersion": api_version, "kind": kind,
        "metadata": {"name": f"{kind.lower()}-x", "namespace": "research", "uid": f"uid-{kind}",
                     "annotations": {"kai.scheduler/topology": "default",
                                     "kai.scheduler/topology-required-placement": "block"}},
        "spec": {specs_field: {
            head: {"replicas": 1, "template": copy.deepcopy(template)},
            "Worker": {"replicas": 8, "template": {
                "metadata": {"annotations": {"kai.scheduler/segment-size": "4",
                                             "kai.scheduler/segment-topology-required-placement": "rack"}},
                **copy.deepcopy(template)}}}},
    }


@pytest.mark.parametrize("kind, api_version, specs_field, head", [
    ("JAXJob", "kubeflow.org/v1", "jaxReplicaSpecs", "Master"),
    ("XGBoostJob", "kubeflow.org/v1", "xgbReplicaSpecs", "Master"),
    ("MPIJob", "kubeflow.org/v2beta1", "mpiReplicaSpecs", "Launcher"),
    ("PyTorchJob", "kubeflow.org/v1", "pytorchReplicaSpecs", "Master"),
])
def test_every_kubeflow_kind_gets_its_segments(kind, api_version, specs_field, head):
    job = kubeflow_job(kind, api_version, specs_field, head)
    app, _ = make_app([job])
    client = TestClient(app)
    for pod in expand_pods(job):
        role = pod["metadata"]["labels"]["training.kubeflow.org/replica-type"]
        index = int(pod["metadata"]["labels"]["training.kubeflow.org/replica-index"])
        _, patched_pod = admit_ok(client, review_of(pod, kind, seed=pod["metadata"]["name"]))
        env = env_of(patched_pod["spec"]["containers"][0])
        if role == "worker":
            assert labels(patched_pod)["kai.scheduler/subgroup-name"] == f"worker-{index // 4}"
            assert (env["KAI_SEGMENT_INDEX"], env["KAI_SEGMENT_RANK"], env["KAI_NUM_SEGMENTS"]) == \
                (str(index // 4), str(index % 4), "2")
        else:
            assert labels(patched_pod)["kai.scheduler/subgroup-name"] == head.lower()
            assert "KAI_SEGMENT_INDEX" not in env
        assert annotations(patched_pod)["pod-group-name"] == f"pg-{kind.lower()}-x-uid-{kind}"


def test_scheduler_plugins_podgroup_pod_gets_no_kai_keys():
    podgroup = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": "mpi-gang", "namespace": "research"}, "spec": {"minMember": 3}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "mpi-gang-0", "namespace": "research", "labels": {"scheduling.x-k8s.io/pod-group": "mpi-gang"}},
        "spec": {"containers": [{"name": "main", "image": "x"}]}}
    app, _ = make_app([podgroup])
    client = TestClient(app)
    body = review_of(pod, "Job")
    response, patched_pod = admit_ok(client, body)
    assert patched_pod == body["request"]["object"] and "warnings" not in response


def test_before_the_first_sync_grouped_pods_wait_and_others_pass():
    app, state = make_app()
    state.synced_once = False
    client = TestClient(app)
    status = deny(client, payload("tfjob-worker-5"))["status"]
    assert status["code"] == 503 and "first sync" in status["message"]
    admit_ok(client, payload("deployment-pod"))
    state.synced_once = True
    _, pod = admit_ok(client, payload("tfjob-worker-5"))
    assert labels(pod)["kai.scheduler/segment-index"] == "1"


@pytest.mark.parametrize("name, path, value, message", [
    ("job-generate-name-index-3", ["metadata", "labels"], [], "request.object.metadata.labels must be a map of strings"),
    ("job-generate-name-index-3", ["metadata", "annotations"], "", "metadata.annotations must be a map of strings"),
    ("deployment-pod", ["metadata", "ownerReferences", 0, "apiVersion"], 5,
     "request.object.metadata.ownerReferences[0].apiVersion must be a string"),
    ("job-generate-name-index-3", ["metadata", "ownerReferences", 0, "name"], ["x"],
     "request.object.metadata.ownerReferences[0].name must be a string"),
    ("deployment-pod", ["metadata", "ownerReferences", 0, "kind"], {"a": 5},
     "request.object.metadata.ownerReferences[0].kind must be a string"),
    ("tfjob-worker-5", ["spec", "containers", 0, "env", 0, "name"], ["x"],
     "request.object.spec.containers[].env[].name must be a non-empty string"),
])
def test_a_pod_of_the_wrong_shape_is_denied_naming_the_field(client, name, path, value, message):
    """Only a hand-made review can carry these (the API server validates pods first); still a clear denial,
    never an internal error."""
    body = payload(name)
    parent = body["request"]["object"]
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    response = deny(client, body)
    assert response["status"]["code"] == 400 and message in response["status"]["message"], response["status"]


def test_the_fits_gate_is_added_once_beside_other_gates():
    from app.webhook.patch import add_gate
    assert add_gate(None, "tas-extender.io/gang-fits") == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": "tas-extender.io/gang-fits"}]}]
    assert add_gate([{"name": "other"}], "tas-extender.io/gang-fits") == [
        {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "tas-extender.io/gang-fits"}}]
    assert add_gate([{"name": "tas-extender.io/gang-fits"}], "tas-extender.io/gang-fits") == []
