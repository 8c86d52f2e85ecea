"""Review fixes of the service: malformed pods get a clear Error (not an internal error), the standalone
writer changes the state under its lock, per-gang indexes forget gangs whose pods are gone, a broken
command module does not break the CLI, and stopping the Kubernetes parts ends the restore thread."""
from __future__ import annotations

import copy
import logging
import sys
import threading
import types

import orjson
import pytest
from pydantic import BaseModel, ValidationError

from app import cli
from app.kube.parts import KubeParts
from app.state import POD_KIND
from app.wire import describe_errors
from service_helpers import Clock, indexed_job, job_pods, make_client, plain_pod, schedule, service, watch
from webhook_helpers import make_app, post, review_of

BAD_PODS = [
    ({"metadata": {"namespace": "default"}}, "Pod.metadata.name is required"),
    ({"metadata": {"name": 5}}, "Pod.metadata.name must be a string"),
    ({"metadata": {"name": "p", "annotations": "x"}}, "Pod.metadata.annotations must be a map of strings"),
    ({"metadata": {"name": "p", "labels": {"pod-group-name": 7}}}, "Pod.metadata.labels must be a map of strings"),
    ({"metadata": {"name": "p", "ownerReferences": "x"}}, "Pod.metadata.ownerReferences must be a list"),
    ({"metadata": {"name": "p", "ownerReferences": [5]}}, "Pod.metadata.ownerReferences must be a list"),
    ({"metadata": {"name": "p"}, "spec": "x"}, "Pod.spec must be an object"),
    ({"metadata": {"name": "p"}, "spec": {"containers": [{"resources": "x"}]}},
     "Pod.spec.containers[].resources must hold maps"),
]


@pytest.fixture(scope="module")
def client():
    return make_client()


@pytest.mark.parametrize("pod, message", BAD_PODS)
def test_filter_names_the_bad_pod_field(client, pod, message):
    response = client.post("/scheduler/filter", json={"Pod": pod, "NodeNames": ["node-a"]})
    assert response.status_code == 200
    body = response.json()
    assert body["NodeNames"] == [] and body["Nodes"] is None
    assert message in body["Error"] and "internal error" not in body["Error"]
    assert "Value error" not in body["Error"]


@pytest.mark.parametrize("verb, empty", [("prioritize", []), ("preempt", {"NodeNameToMetaVictims": {}})])
@pytest.mark.parametrize("pod, message", BAD_PODS[2:6])
def test_prioritize_and_preempt_name_the_bad_pod_field(client, verb, empty, pod, message):
    response = client.post(f"/scheduler/{verb}", json={"Pod": pod, "NodeNames": ["node-a"],
                                                       "NodeNameToMetaVictims": {}})
    assert response.status_code == 200
    assert response.json() == empty
    assert message in response.headers["X-Extender-Error"]
    assert "internal error" not in response.headers["X-Extender-Error"]


def test_a_well_formed_pod_still_passes(client):
    watch(client, plain_pod("fine"))
    body = client.post("/scheduler/filter", json={"Pod": plain_pod("fine"), "NodeNames": ["node-a"]}).json()
    assert body["Error"] == "" and body["NodeNames"] == ["node-a"]


def test_webhook_denies_owner_references_of_the_wrong_type_with_a_bad_request():
    app, _ = make_app()
    from fastapi.testclient import TestClient
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "team-a", "ownerReferences": "job"},
           "spec": {"containers": [{"name": "main", "image": "x"}]}}
    status, answer = post(TestClient(app), review_of(pod))
    assert status == 200
    response = answer["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    assert "request.object.metadata.ownerReferences must be a list of objects" in response["status"]["message"]


def test_describe_errors_names_the_field_and_drops_pydantic_prefix():
    class Model(BaseModel):
        count: int

    with pytest.raises(ValidationError) as caught:
        Model.model_validate({"count": "many"})
    assert describe_errors(caught.value).startswith("count: ")


# --- standalone writer ---------------------------------------------------------------------------------
def test_memory_writer_changes_pods_under_the_state_lock():
    """A pending pod's annotation must wait for the state lock like every other change, or it races the
    filter that reads the same pod."""
    client = make_client()
    state = service(client)
    pod = plain_pod("pending")
    state.apply(POD_KIND, "ADDED", pod)
    holding, release, done = threading.Event(), threading.Event(), threading.Event()

    def hold_lock():
        with state.lock:
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    assert holding.wait(30)
    memory = client.app.state.engine.writer
    writer = threading.Thread(target=lambda: (memory.annotate_pod("default", "pending", {"a": "b"}),
                                              done.set()))
    writer.start()
    try:
        assert not done.wait(0.3), "the writer changed the pod while another thread held the state lock"
    finally:
        release.set()
        holder.join(30)
        writer.join(30)
    assert done.is_set()
    assert state.find_pod("default", "pending")["metadata"]["annotations"] == {"a": "b"}


# --- per-gang indexes do not grow forever -------------------------------------------------------------
def test_a_gang_whose_bound_pods_are_all_gone_is_forgotten():
    job = indexed_job("short", 4, 8, required=None, segment=None)
    client = make_client(job, clock=Clock())
    state = service(client)
    pods = job_pods(job)
    for pod in pods:
        schedule(client, pod)
    (gang,) = [plan.key for plan in state.plans]
    assert len(state.bound[gang]) == 4
    for pod in pods:
        state.apply(POD_KIND, "DELETED", state.find_pod("team-a", pod["metadata"]["name"]))
    assert gang not in state.bound


def test_a_podgroup_whose_pods_are_all_deleted_is_forgotten():
    state = service(make_client())
    pods = []
    for i in range(2):
        pod = copy.deepcopy(plain_pod(f"member-{i}", namespace="team-a"))
        pod["metadata"]["annotations"] = {"pod-group-name": "pg"}
        pods.append(pod)
        state.apply(POD_KIND, "ADDED", pod)
    assert set(state.podgroup_pods[("team-a", "pg")]) == {"member-0", "member-1"}
    state.apply(POD_KIND, "DELETED", pods[0])
    assert set(state.podgroup_pods[("team-a", "pg")]) == {"member-1"}
    state.apply(POD_KIND, "DELETED", pods[1])
    assert ("team-a", "pg") not in state.podgroup_pods


# --- CLI -------------------------------------------------------------------------------------------------
def test_a_command_module_that_fails_to_import_does_not_break_the_others(monkeypatch, capsys):
    import pkgutil

    real = pkgutil.iter_modules

    def with_broken(path):
        yield from real(path)
        yield pkgutil.ModuleInfo(None, "zz_broken", False)

    broken = types.ModuleType("app.commands.zz_broken")

    def register(_subparsers):
        raise ImportError("No module named 'missing_dependency'")
    broken.register = register
    monkeypatch.setattr(pkgutil, "iter_modules", with_broken)
    monkeypatch.setitem(sys.modules, "app.commands.zz_broken", broken)

    parser = cli.build_parser()
    assert parser.parse_args(["topology", "--demo"]).command == "topology"
    assert cli.main(["zz-broken", "--anything"]) == 1
    assert "missing_dependency" in capsys.readouterr().err


# --- restore thread ---------------------------------------------------------------------------------------
class _NeverSyncing:
    synced_once = False

    def start(self):
        pass

    def stop(self):
        pass


def test_stopping_the_kube_parts_ends_the_after_sync_thread_of_a_cluster_never_synced():
    parts = KubeParts(_NeverSyncing(), writer=None)
    state = types.SimpleNamespace(synced_once=False, gangs=None)
    before = {t for t in threading.enumerate() if t.name == "after-sync"}
    parts.start(state)
    started = [t for t in threading.enumerate() if t.name == "after-sync" and t not in before]
    assert len(started) == 1
    parts.stop()
    started[0].join(30)
    assert not started[0].is_alive()


# --- request size ------------------------------------------------------------------------------------------
def test_the_webhook_refuses_a_body_over_the_request_limit():
    """The extender verbs always had --max-request-bytes; the webhook on the same port read any body whole."""
    from fastapi.testclient import TestClient
    app, _ = make_app()
    app.state.service.settings.max_request_bytes = 2048
    response = TestClient(app).post("/mutate", content=b"{" + b" " * 4096 + b"}",
                                    headers={"content-type": "application/json"})
    assert response.status_code == 413
    answer = response.json()["response"]
    assert answer["allowed"] is False and answer["status"]["code"] == 413
    assert "exceeds the limit of 2048 bytes" in answer["status"]["message"]


def test_the_extender_still_refuses_a_body_over_the_request_limit():
    client = make_client(max_request_bytes=2048)
    response = client.post("/scheduler/filter", content=b"{" + b" " * 4096 + b"}",
                           headers={"content-type": "application/json"})
    assert response.status_code == 200
    assert "exceeds the limit of 2048 bytes" in response.json()["Error"]


def test_webhook_denies_env_entries_that_are_not_objects():
    """The env builder reads each entry's name: a bare value used to end in an internal error (HTTP 500)."""
    from fastapi.testclient import TestClient
    from webhook_helpers import payload

    app, _ = make_app()
    body = copy.deepcopy(payload("tfjob-worker-5"))
    body["request"]["object"]["spec"]["containers"][0]["env"] = ["NOT_AN_OBJECT"]
    status, answer = post(TestClient(app), body)
    assert status == 200
    response = answer["response"]
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert "request.object.spec.containers[].env must be a list of objects" in response["status"]["message"]


# --- the event loop is never frozen by the state lock ---------------------------------------------------
def test_a_filter_waiting_for_the_state_lock_does_not_freeze_other_requests():
    """While a sync thread holds the state lock (a relist rebuilding the cluster), a filter must wait for
    it off the event loop: the probes and the webhook on the same loop keep answering."""
    import asyncio

    import httpx

    client = make_client()
    state = service(client)
    watch(client, plain_pod("waits"))
    holding, release = threading.Event(), threading.Event()

    def sync_thread():
        with state.lock:
            holding.set()
            release.wait(20)          # a fallback only: the test releases as soon as /healthz answered

    holder = threading.Thread(target=sync_thread)
    holder.start()
    assert holding.wait(30)
    order = []

    async def scenario():
        transport = httpx.ASGITransport(app=client.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            async def filter_call():
                response = await http.post("/scheduler/filter",
                                           json={"Pod": plain_pod("waits"), "NodeNames": ["node-a"]})
                order.append("filter")
                return response

            task = asyncio.create_task(filter_call())
            await asyncio.sleep(0)
            health = await http.get("/healthz")
            order.append("healthz")
            release.set()
            return health, await task

    try:
        health, filtered = asyncio.run(scenario())
    finally:
        release.set()
        holder.join(30)
    assert health.status_code == 200
    assert filtered.json()["NodeNames"] == ["node-a"]
    assert order == ["healthz", "filter"]


def test_debug_objects_refuses_a_malformed_pod_instead_of_failing():
    client = make_client()
    response = client.post("/debug/objects", content=b'{"apiVersion": "v1", "kind": "Pod", "metadata": '
                                                     b'{"name": "x", "namespace": "d", "annotations": "oops"}}')
    assert response.status_code == 400
    assert 'Pod x: metadata.annotations must be a map, got "oops"' in response.json()["detail"]
    assert service(client).find_pod("d", "x") is None


# --- logging never fails a request ----------------------------------------------------------------------
def test_a_denial_is_answered_when_info_logs_are_on(caplog):
    """`serve` logs at info: the denial's log line used to pass `message=` in `extra`, which logging
    refuses with a KeyError, so every denied pod got an internal error (HTTP 500) instead of its reason."""
    from fastapi.testclient import TestClient

    caplog.set_level(logging.INFO)
    app, _ = make_app()
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "team-a", "labels": "not-a-map"},
           "spec": {"containers": [{"name": "main", "image": "x"}]}}
    status, answer = post(TestClient(app), review_of(pod))
    assert status == 200
    assert answer["response"]["allowed"] is False and answer["response"]["status"]["code"] == 400
    denial = next(r for r in caplog.records if r.getMessage() == "admission denied")
    assert "metadata.labels must be a map of strings" in denial.text


def test_standalone_events_are_logged_when_info_logs_are_on(caplog):
    caplog.set_level(logging.INFO)
    writer = make_client().app.state.engine.writer
    pod = plain_pod("victim")
    writer.event(pod, "Preempted", "Preempted by gang team-a/x")
    assert writer.events[-1]["message"] == "Preempted by gang team-a/x"
    assert any(getattr(r, "text", None) == "Preempted by gang team-a/x" for r in caplog.records)


def test_log_fields_never_shadow_log_record_attributes():
    from app.logs import JsonFormatter, fields

    extra = fields(pod="a/b", message="m", name="n", args="x")
    assert extra == {"pod": "a/b", "message_": "m", "name_": "n", "args_": "x"}
    record = logging.getLogger("test").makeRecord("test", logging.INFO, "f", 1, "hello", (), None, extra=extra)
    line = orjson.loads(JsonFormatter().format(record))
    assert line["msg"] == "hello" and line["message_"] == "m" and line["pod"] == "a/b"
