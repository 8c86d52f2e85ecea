"""The service around the verbs: settings, the serve command, probes, metrics, the process itself."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from app.cli import build_parser
from app.commands.serve import settings_from
from app.server import create_app
from app.settings import Settings
from app.state import ServiceState

from service_helpers import indexed_job, job_pods, make_client, plain_pod, schedule, watch


def test_settings_from_environment_and_flags(monkeypatch):
    monkeypatch.setenv("TAS_PORT", "9000")
    monkeypatch.setenv("TAS_RESERVATION_TTL", "30")
    monkeypatch.setenv("TAS_STRATEGY", "spread")
    monkeypatch.setenv("POD_NAMESPACE", "scheduling")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    args = build_parser().parse_args(["serve", "--port", "9100", "--url-prefix", "tas/", "--leader-elect",
                                      "--preemption", "dry-run", "--set-scheduler-name", "false"])
    settings = settings_from(args)
    assert settings.port == 9100 and settings.reservation_ttl == 30 and settings.strategy == "spread"
    assert settings.url_prefix == "/tas" and settings.leader_elect is True and settings.preemption == "dry-run"
    assert settings.set_scheduler_name is False and settings.lease_namespace == "scheduling"
    assert settings.lease_name == "tas-extender" and settings.scheduler_name == "tas-scheduler"
    assert settings.mode == "standalone"


def test_defaults():
    settings = Settings()
    assert (settings.host, settings.port, settings.url_prefix) == ("127.0.0.1", 8888, "/scheduler")
    assert settings.reservation_ttl == 300 and settings.strategy == "binpack" and settings.preemption == "on"


def test_in_cluster_is_detected_only_when_nothing_else_is_configured(monkeypatch):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert settings_from(build_parser().parse_args(["serve"])).mode == "kubernetes"
    assert settings_from(build_parser().parse_args(["serve", "--cluster", "x.yaml"])).mode == "standalone"


def test_bad_settings_name_the_field(capsys):
    args = build_parser().parse_args(["serve", "--tls-cert", "cert.pem"])
    assert args.func(args) == 2
    assert capsys.readouterr().err == ("error: --tls-cert (TAS_TLS_CERT) and --tls-key (TAS_TLS_KEY) must be "
                                       "given together\n")
    args = build_parser().parse_args(["serve", "--strategy", "random"])
    assert args.func(args) == 2 and "--strategy (TAS_STRATEGY)" in capsys.readouterr().err


def test_probes_and_metrics():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["status"] == "ready"
    schedule(client, job_pods(job)[0])
    schedule(client, plain_pod("web"))
    text = client.get("/metrics").text
    for name in ('tas_extender_request_seconds_bucket{le="0.005",verb="filter"}',
                 'tas_extender_request_seconds_count{verb="bind"}', "tas_extender_planning_seconds_count",
                 'tas_extender_gangs{status="planned"} 1.0', "tas_extender_reservations 7.0",
                 'tas_extender_binds_total{result="bound"} 2.0'):
        assert name in text, name


class Elector:
    def __init__(self, leader: bool):
        self.leader = leader

    def is_leader(self) -> bool:
        return self.leader


def test_readiness_waits_for_sync_and_leadership():
    state = ServiceState(Settings(leader_elect=True), elector=Elector(False))
    assert state.ready() == (False, "waiting for the first full sync of the cluster")
    state.synced()
    assert state.ready() == (False, "not the leader (standby)")
    state.elector.leader = True
    assert state.ready() == (True, "ok")


def test_custom_url_prefix_and_cluster_file(tmp_path):
    dump = tmp_path / "cluster.yaml"
    dump.write_text("""
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: solo, labels: {kubernetes.io/hostname: solo}}
  status: {allocatable: {cpu: "4", memory: 8Gi, pods: "10"}}
""")
    from fastapi.testclient import TestClient
    client = TestClient(create_app(Settings(cluster=str(dump), url_prefix="/ext")))
    assert client.post("/debug/objects", json=plain_pod("a")).json() == {"applied": ["Pod default/a"]}
    answer = client.post("/ext/filter", json={"Pod": plain_pod("a"), "NodeNames": ["solo"]}).json()
    assert answer["NodeNames"] == ["solo"]
    assert client.get("/debug/topology").json()["nodes"] == 1


def test_webhook_router_is_mounted_when_available():
    client = make_client()
    try:
        from app.http.webhook import router  # noqa: F401
    except ImportError:
        pytest.skip("app.webhook has no router yet")
    response = client.post("/mutate", content=b"{}")
    assert response.status_code not in (404, 405)        # the webhook answers on the same app


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_command_runs_standalone_and_answers_over_http():
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAS_", "KUBERNETES_"))}
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                                "--log-level", "warning"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60         # a cold start on a loaded machine
        while True:
            try:
                if httpx.get(f"{base}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and process.poll() is None, process.stderr.read1().decode()
            time.sleep(0.1)
        assert httpx.post(f"{base}/debug/objects", json=plain_pod("curl")).status_code == 200
        answer = httpx.post(f"{base}/scheduler/filter", json={"Pod": plain_pod("curl"), "NodeNames": ["node-01"]}).json()
        assert answer["NodeNames"] == ["node-01"]
        assert httpx.post(f"{base}/scheduler/bind", json={"PodName": "curl", "PodNamespace": "default",
                                                          "PodUID": "uid-curl", "Node": "node-01"}).json() == {"Error": ""}
    finally:
        process.terminate()
        process.wait(timeout=10)


class _NoRouter:
    """A router that answers nothing: whatever still reaches it is not served directly."""
    async def __call__(self, scope, receive, send):
        raise AssertionError(f"{scope['path']} went through FastAPI's router")


def test_the_verbs_and_the_webhook_skip_fastapis_stack():
    """Issue 31: the calls on kube-scheduler's loop (every pod's webhook, filter and bind) are answered by
    app.http.direct, not through FastAPI's middlewares and a router that matches every debug route; the
    answers are the routes' own. Other paths still go through the app."""
    client = make_client()
    client.app.router = _NoRouter()            # read when the middleware stack is built, at the first call
    pod = plain_pod("direct", gpus=1)
    watch(client, pod)
    names = ["node-01", "node-02"]
    answer = client.post("/scheduler/filter", json={"Pod": pod, "NodeNames": names}).json()
    assert answer["NodeNames"] == names and answer["Error"] == ""
    scores = client.post("/scheduler/prioritize", json={"Pod": pod, "NodeNames": names}).json()
    assert [s["Host"] for s in scores] == names
    assert "not valid JSON" in client.post("/scheduler/bind", content=b"{").json()["Error"]
    review = client.post("/mutate", content=b"{}")
    assert review.status_code == 400 and review.json()["response"]["allowed"] is False
    with pytest.raises(AssertionError, match="went through FastAPI's router"):
        client.get("/healthz")
