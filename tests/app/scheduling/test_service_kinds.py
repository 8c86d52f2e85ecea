"""Kinds that number their pods only through `kai.scheduler/pod-index-label`: StatefulSet and JobSet (watched
by default) and custom kinds named in --extra-kinds / TAS_EXTRA_KINDS, through the whole service: the
extender verbs plan their gangs with segments, the webhook injects KAI_SEGMENT_*, and a live source
watches them (against the fake API server)."""
from __future__ import annotations

import copy
import json

import jsonpatch
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.cli import build_parser
from app.ports import WATCHED_KINDS, WatchedKind
from app.server import create_app
from app.settings import EXTRA_KIND_FORMAT, Settings
from app.state import GANG_ANNOTATION
from topology.demo import demo_objects

from service_helpers import GPU, domain_of, filter_, make_client, schedule, service
from webhook_helpers import env_of, operations, review_of

fakekube = pytest.importorskip("fakekube")
fake_kube = fakekube.fake_kube          # the fixture
wait_until = fakekube.wait_until

SEGMENTS = {"kai.scheduler/segment-size": "4", "kai.scheduler/segment-topology-required-placement": "rack"}
ROOT = {"kai.scheduler/topology": "default", "kai.scheduler/topology-required-placement": "block"}
CONTAINERS = [{"name": "main", "image": "trainer", "resources": {"limits": {GPU: "4"}}}]


# --- workloads and the pods their controllers create ------------------------------------------------------------

def statefulset(name: str = "cache", replicas: int = 8) -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": "serving", "uid": f"uid-{name}", "resourceVersion": "1",
                         "annotations": dict(ROOT)},
            "spec": {"replicas": replicas, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}, "annotations": {
                         "kai.scheduler/pod-index-label": "apps.kubernetes.io/pod-index", **SEGMENTS}},
                         "spec": {"schedulerName": "tas-scheduler", "containers": copy.deepcopy(CONTAINERS)}}}}


def statefulset_pods(workload: dict) -> list[dict]:
    """As the StatefulSet controller makes them: <name>-<ordinal>, the pod-index label, a controller ref."""
    metadata, template = workload["metadata"], workload["spec"]["template"]
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{metadata['name']}-{i}", "namespace": metadata["namespace"],
                          "uid": f"uid-{metadata['name']}-{i}",
                          "labels": {**template["metadata"]["labels"], "apps.kubernetes.io/pod-index": str(i),
                                     "statefulset.kubernetes.io/pod-name": f"{metadata['name']}-{i}"},
                          "annotations": dict(template["metadata"]["annotations"]),
                          "ownerReferences": [_controller_ref(workload)]},
             "spec": {"schedulerName": "tas-scheduler", **copy.deepcopy(template["spec"])},
             "status": {"phase": "Pending"}}
            for i in range(workload["spec"]["replicas"])]


def jobset(name: str = "train", workers: int = 8) -> dict:
    """A driver and `workers` one-pod Jobs; a worker's index is its Job's index in the replicated job."""
    def replicated(role: str, replicas: int, annotations: dict) -> dict:
        return {"name": role, "replicas": replicas, "template": {"spec": {
            "parallelism": 1, "completions": 1, "completionMode": "Indexed",
            "template": {"metadata": {"annotations": annotations},
                         "spec": {"restartPolicy": "Never", "containers": copy.deepcopy(CONTAINERS)}}}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "research", "uid": f"uid-{name}", "resourceVersion": "1",
                         "annotations": dict(ROOT)},
            "spec": {"replicatedJobs": [
                replicated("driver", 1, {}),
                replicated("workers", workers, {"kai.scheduler/pod-index-label": "jobset.sigs.k8s.io/job-index",
                                                **SEGMENTS})]}}


def jobset_pods(workload: dict) -> list[dict]:
    """As JobSet's child Jobs make them: owned by the Job, labelled with the JobSet, replicated job and
    job index (each Job runs one pod, completion index 0)."""
    name, namespace = workload["metadata"]["name"], workload["metadata"]["namespace"]
    pods = []
    for replicated in workload["spec"]["replicatedJobs"]:
        template = replicated["template"]["spec"]["template"]
        for job_index in range(replicated["replicas"]):
            job_name = f"{name}-{replicated['name']}-{job_index}"
            labels = {"jobset.sigs.k8s.io/jobset-name": name,
                      "jobset.sigs.k8s.io/replicatedjob-name": replicated["name"],
                      "jobset.sigs.k8s.io/job-index": str(job_index),
                      "batch.kubernetes.io/job-name": job_name, "batch.kubernetes.io/job-completion-index": "0"}
            pods.append({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": f"{job_name}-0-x7k2p", "namespace": namespace,
                                      "uid": f"uid-{job_name}", "labels": labels,
                                      "annotations": dict(template["metadata"]["annotations"]),
                                      "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job_name,
                                                           "uid": f"uid-{job_name}", "controller": True,
                                                           "blockOwnerDeletion": True}]},
                         "spec": {"schedulerName": "tas-scheduler", **copy.deepcopy(template["spec"])},
             "status": {"phase": "Pending"}})
    return pods


def trainer(name: str = "bert", replicas: int = 8) -> dict:
    """A custom kind: a pod template and a replica count, its pods numbered in a label of its own."""
    return {"apiVersion": "example.com/v1", "kind": "Trainer",
            "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "annotations": dict(ROOT)},
            "spec": {"replicas": replicas, "template": {
                "metadata": {"annotations": {"kai.scheduler/pod-index-label": "example.com/rank", **SEGMENTS}},
                "spec": {"containers": copy.deepcopy(CONTAINERS)}}}}


def trainer_pods(workload: dict) -> list[dict]:
    metadata, template = workload["metadata"], workload["spec"]["template"]
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{metadata['name']}-{i}", "namespace": metadata["namespace"],
                          "labels": {"example.com/rank": str(i)},
                          "annotations": dict(template["metadata"]["annotations"]),
                          "ownerReferences": [_controller_ref(workload)]},
             "spec": {"schedulerName": "tas-scheduler", **copy.deepcopy(template["spec"])},
             "status": {"phase": "Pending"}}
            for i in range(workload["spec"]["replicas"])]


def _controller_ref(workload: dict) -> dict:
    return {"apiVersion": workload["apiVersion"], "kind": workload["kind"], "name": workload["metadata"]["name"],
            "uid": workload["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def admission_review(pod: dict, controller: str) -> dict:
    body = review_of(pod, "ReplicaSet")
    body["request"]["userInfo"]["username"] = f"system:serviceaccount:kube-system:{controller}"
    body["request"]["object"]["metadata"].pop("uid", None)      # the API server sets it after admission
    return body


def mutate(client: TestClient, body: dict) -> dict:
    """The pod after the API server applied the webhook's patch (the review must be allowed)."""
    answer = client.post("/mutate", content=json.dumps(body), headers={"Content-Type": "application/json"})
    assert answer.status_code == 200
    response = answer.json()["response"]
    assert response["allowed"], response.get("status")
    return jsonpatch.apply_patch(body["request"]["object"], operations(response))


def segment_env(pod: dict) -> tuple:
    env = env_of(pod["spec"]["containers"][0])
    return tuple(env[k] for k in ("KAI_SEGMENT_INDEX", "KAI_SEGMENT_RANK", "KAI_SEGMENT_SIZE", "KAI_NUM_SEGMENTS"))


def debug(client: TestClient) -> TestClient:
    """Where /debug answers: the main app standalone, the loopback-only debug app with a cluster."""
    apart = client.app.state.listeners.get("debug")
    return client if apart is None else TestClient(apart)


def assert_planned_in_segments(client: TestClient, gang: str, role: str, pods: int = 8) -> None:
    detail = debug(client).get(f"/debug/plans/{gang}").json()
    assert detail["counts"]["planned"] + detail["counts"]["bound"] == len(detail["slots"])
    slots = {s["slot"]: s for s in detail["slots"] if s["role"] == role}
    assert len(slots) == pods
    for segment in range(pods // 4):
        members = [slots[f"{role}-{i}"] for i in range(segment * 4, segment * 4 + 4)]
        assert {m["group"] for m in members} == {f"{role}-{segment}"}
        assert len({domain_of(client, m["node"], "rack") for m in members}) == 1
    assert len({domain_of(client, s["node"], "block") for s in detail["slots"]}) == 1


# --- the standalone service ----------------------------------------------------------------------------------------

def test_first_statefulset_pod_plans_the_whole_gang_in_segments():
    workload = statefulset()
    pods = statefulset_pods(workload)
    client = make_client(workload)
    answer = filter_(client, pods[0])
    assert answer["Error"] == "" and len(answer["NodeNames"]) == 1
    plans = client.get("/debug/plans").json()["plans"]
    assert [(p["gang"], p["kind"], p["pods"]) for p in plans] == [("serving/pg-cache-uid-cache", "StatefulSet", 8)]
    assert_planned_in_segments(client, "serving/pg-cache-uid-cache", "statefulset")


def test_statefulset_pods_get_segments_from_the_webhook_and_land_in_them():
    workload = statefulset()
    client = make_client(workload)
    placed = {}
    for pod in statefulset_pods(workload):
        mutated = mutate(client, admission_review(pod, "statefulset-controller"))
        index = int(pod["metadata"]["name"].rsplit("-", 1)[1])
        assert segment_env(mutated) == (str(index // 4), str(index % 4), "4", "2")
        assert mutated["metadata"]["labels"]["kai.scheduler/segment-index"] == str(index // 4)
        assert mutated["metadata"]["annotations"]["pod-group-name"] == "pg-cache-uid-cache"
        mutated["metadata"]["uid"] = pod["metadata"]["uid"]
        mutated["spec"]["schedulerName"] = "tas-scheduler"      # the template's (the review fixture writes the default)
        placed[index] = schedule(client, mutated)
    for segment in (range(0, 4), range(4, 8)):
        assert len({domain_of(client, placed[i], "rack") for i in segment}) == 1
    assert len({domain_of(client, node, "block") for node in placed.values()}) == 1


def test_jobset_workers_are_planned_in_segments_and_get_their_env():
    workload = jobset()
    pods = jobset_pods(workload)
    client = make_client(workload)
    workers = [p for p in pods if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"]
    mutated = mutate(client, admission_review(workers[5], "job-controller"))
    assert segment_env(mutated) == ("1", "1", "4", "2")
    assert mutated["metadata"]["annotations"]["pod-group-name"] == "pg-train-uid-train"
    answer = filter_(client, workers[0])
    assert answer["Error"] == "" and len(answer["NodeNames"]) == 1
    assert_planned_in_segments(client, "research/pg-train-uid-train", "workers")
    detail = client.get("/debug/plans/research/pg-train-uid-train").json()
    assert [s["role"] for s in detail["slots"]].count("driver") == 1
    placed = [schedule(client, pod) for pod in pods]
    assert len({domain_of(client, node, "block") for node in placed}) == 1


# --- a live cluster (the fake API server) -------------------------------------------------------------------------

def _seed_nodes(fake) -> None:
    fake.install_crd("kai.scheduler", "v1alpha1", "topologies", "Topology", namespaced=False)
    for obj in demo_objects():
        if obj["kind"] in ("Node", "Pod") or obj["apiVersion"].startswith("kai.scheduler"):
            fake.create(copy.deepcopy(obj))


def _live(fake, **settings) -> TestClient:
    from app.kube import adapters
    app = create_app(Settings(kubeconfig="unused", **settings),
                     kube=lambda s: adapters(s, host=fake.url))
    return TestClient(app)


def _create_with_pods(fake, workload: dict, make_pods) -> list[dict]:
    created = fake.create(copy.deepcopy(workload))
    assert created["metadata"]["uid"] == workload["metadata"]["uid"]
    for pod in make_pods(workload):
        pod["metadata"].pop("uid", None)
        fake.create(pod)
    return [fake.get("v1", "Pod", pod["metadata"]["name"], namespace=pod["metadata"]["namespace"])
            for pod in make_pods(workload)]


def test_extra_kind_is_watched_and_its_pods_are_grouped(fake_kube):
    _seed_nodes(fake_kube)
    fake_kube.install_crd("example.com", "v1", "trainers", "Trainer")
    workload = trainer()
    pods = _create_with_pods(fake_kube, workload, trainer_pods)
    with _live(fake_kube, extra_kinds="trainers.example.com/v1=Trainer") as client:
        wait_until(lambda: client.get("/readyz").status_code == 200, what="first sync")
        assert service(client).objects.get("Trainer", "team-a", "bert", group="example.com") is not None
        mutated = mutate(client, admission_review(copy.deepcopy(pods[6]), "trainer-controller"))
        assert segment_env(mutated) == ("1", "2", "4", "2")
        assert filter_(client, pods[0])["Error"] == ""
        assert_planned_in_segments(client, "team-a/pg-bert-uid-bert", "trainer")
        for pod in pods:
            schedule(client, pod)
        stored = [fake_kube.get("v1", "Pod", p["metadata"]["name"], namespace="team-a") for p in pods]
        assert all(p["spec"].get("nodeName") for p in stored)
        assert {p["metadata"]["annotations"][GANG_ANNOTATION] for p in stored} == {"team-a/pg-bert-uid-bert"}
        listed = [path for method, path in fake_kube.requests if method == "GET"]
        assert any(path.startswith("/apis/example.com/v1/trainers") for path in listed)


def test_without_extra_kinds_a_custom_kind_is_not_watched_and_its_pods_pass_plainly(fake_kube):
    _seed_nodes(fake_kube)
    fake_kube.install_crd("example.com", "v1", "trainers", "Trainer")
    pods = _create_with_pods(fake_kube, trainer(), trainer_pods)
    with _live(fake_kube) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200, what="first sync")
        assert service(client).objects.get("Trainer", "team-a", "bert") is None
        answer = filter_(client, pods[0])
        assert answer["Error"] == "" and len(answer["NodeNames"]) > 1      # a plain pod: every fitting node
        assert client.get("/debug/plans").status_code == 404          # with a cluster: loopback only
        assert debug(client).get("/debug/plans").json()["plans"] == []
        body = admission_review(copy.deepcopy(pods[0]), "trainer-controller")
        response = client.post("/mutate", json=body).json()["response"]
        assert response["allowed"] and "patch" not in response
        assert "--extra-kinds" in response["warnings"][0]


def test_statefulsets_are_watched_in_a_live_cluster(fake_kube):
    _seed_nodes(fake_kube)
    fake_kube.install(fakekube.Resource("apps", "v1", "statefulsets", "StatefulSet", True, builtin=True))
    workload = statefulset()
    pods = _create_with_pods(fake_kube, workload, statefulset_pods)
    with _live(fake_kube) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200, what="first sync")
        placed = {pod["metadata"]["name"]: schedule(client, pod) for pod in pods}
        assert_planned_in_segments(client, "serving/pg-cache-uid-cache", "statefulset")
        assert len({domain_of(client, node, "block") for node in placed.values()}) == 1


@pytest.fixture
def trainer_kind():
    """The toy kind of tests/toy_kind.py, registered for one test."""
    from grouper.kinds import register, unregister
    from toy_kind import TRAINER
    register(TRAINER)
    yield TRAINER
    unregister(TRAINER)


def test_a_kind_registered_in_one_file_is_watched_grouped_admitted_and_listed(fake_kube, trainer_kind):
    """docs/architecture.md's recipe: one file (tests/toy_kind.py) and nothing else; no --extra-kinds."""
    from grouper import expand_pods, group_workload
    from grouper.kinds import numbering_kinds

    assert trainer_kind.watch[0] in Settings().watched_kinds
    assert "example.com/v1 Trainer" in numbering_kinds()
    workload = {"apiVersion": "example.com/v1", "kind": "Trainer",
                "metadata": {"name": "bert", "namespace": "team-a", "uid": "uid-bert", "annotations": dict(ROOT)},
                "spec": {"workers": 8, "template": {"metadata": {"annotations": dict(SEGMENTS)},
                                                     "spec": {"schedulerName": "tas-scheduler",
                                                              "containers": copy.deepcopy(CONTAINERS)}}}}
    [tree] = group_workload(workload)
    assert [leaf.name for leaf in tree.groups() if leaf.is_leaf] == ["worker-0", "worker-1"]
    _seed_nodes(fake_kube)
    fake_kube.install_crd("example.com", "v1", "trainers", "Trainer")
    pods = _create_with_pods(fake_kube, workload, expand_pods)
    assert "ownerReferences" in pods[0]["metadata"] and "example.com/rank" in pods[0]["metadata"]["labels"]
    for pod in pods:
        pod["metadata"]["ownerReferences"] = []       # the toy's pods find it by its name label alone
    with _live(fake_kube) as client:
        wait_until(lambda: client.get("/readyz").status_code == 200, what="first sync")
        listed = [path for method, path in fake_kube.requests if method == "GET"]
        assert any(path.startswith("/apis/example.com/v1/trainers") for path in listed)
        assert service(client).objects.get("Trainer", "team-a", "bert", group="example.com") is not None
        mutated = mutate(client, admission_review(copy.deepcopy(pods[6]), "trainer-controller"))
        assert segment_env(mutated) == ("1", "2", "4", "2")
        assert filter_(client, pods[0])["Error"] == ""
        assert_planned_in_segments(client, "team-a/pg-bert-uid-bert", "worker")
        stray = copy.deepcopy(pods[0])          # segments on a kind that numbers nothing: the kinds that do are listed
        stray["metadata"]["labels"] = {}
        stray["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                                  "uid": "uid-web", "controller": True}]
        response = client.post("/mutate", json=admission_review(stray, "replicaset-controller")).json()["response"]
        assert not response["allowed"] and "example.com/v1 Trainer)" in response["status"]["message"]


# --- settings ------------------------------------------------------------------------------------------------------

def test_extra_kinds_from_the_environment_and_the_flag(monkeypatch):
    from app.commands.serve import settings_from

    monkeypatch.setenv("TAS_EXTRA_KINDS", "trainers.example.com/v1=Trainer, rayjobs.ray.io/v1=RayJob,")
    assert Settings().extra_kinds == (WatchedKind("example.com", "v1", "trainers", "Trainer", True),
                                      WatchedKind("ray.io", "v1", "rayjobs", "RayJob", True))
    args = build_parser().parse_args(["serve", "--extra-kinds", "tfjobs.kubeflow.org/v2=TFJob"])
    settings = settings_from(args)
    assert settings.extra_kinds == (WatchedKind("kubeflow.org", "v2", "tfjobs", "TFJob", True),)
    assert settings.watched_kinds == (*WATCHED_KINDS, settings.extra_kinds[0])


def test_built_in_kinds_named_again_are_watched_once():
    settings = Settings(extra_kinds="statefulsets.apps/v1=StatefulSet,jobsets.jobset.x-k8s.io/v1alpha2=JobSet")
    assert settings.watched_kinds == WATCHED_KINDS
    assert Settings().watched_kinds == WATCHED_KINDS


@pytest.mark.parametrize("entry, why", [
    ("trainers/v1=Trainer", "missing .<group>"),
    ("trainers.example.com=Trainer", "missing /<version>"),
    ("trainers.example.com/v1", "missing =<Kind>"),
    ("Trainers.example.com/v1=Trainer", "plural 'Trainers' is not valid"),
    ("trainers.example..com/v1=Trainer", "group 'example..com' is not valid"),
    ("trainers.example.com/v1 beta=Trainer", "version 'v1 beta' is not valid"),
    ("trainers.example.com/v1=", "Kind '' is not valid"),
    ("trainers.example.com/v1=Trainer=x", "Kind 'Trainer=x' is not valid"),
])
def test_invalid_extra_kinds_name_the_flag_the_entry_and_the_format(entry, why):
    with pytest.raises(ValidationError) as raised:
        Settings(extra_kinds=f"jobs.example.com/v1=Job,{entry}")
    message = str(raised.value)
    assert "--extra-kinds (TAS_EXTRA_KINDS)" in message and repr(entry) in message
    assert why in message and EXTRA_KIND_FORMAT in message


def test_serve_reports_a_bad_extra_kind_and_exits_2(capsys):
    args = build_parser().parse_args(["serve", "--extra-kinds", "trainers=Trainer"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --extra-kinds (TAS_EXTRA_KINDS): entry 'trainers=Trainer'")
    assert EXTRA_KIND_FORMAT in err and "Value error" not in err
