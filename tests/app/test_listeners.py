"""Only kube-scheduler may call the verbs (issue 33, items 1 and 3): with --client-ca they listen on their own
port, whose TLS requires a client certificate signed by that CA; in a cluster the service refuses to start
without one unless --insecure-verbs (then it warns at every start); /debug and /ui are on loopback only."""
from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from app.listeners import INSECURE_VERBS_WARNING, TimedHttpProtocol, preflight, warnings
from app.server import create_app
from app.settings import Settings
from paths import TESTS
from service_helpers import plain_pod

sys.path.insert(0, str(TESTS / "e2e"))
from controlplane import Certificates, write_kubeconfig  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_cluster_service_without_a_client_ca_refuses_to_start():
    problem = preflight(Settings(kubeconfig="kubeconfig"))
    assert problem.startswith("in a cluster the extender verbs bind and evict pods: give --client-ca FILE")
    assert "--insecure-verbs" in problem
    assert preflight(Settings()) is None and warnings(Settings()) == []          # standalone: the demo


def test_insecure_verbs_starts_and_warns_at_every_start():
    settings = Settings(kubeconfig="kubeconfig", insecure_verbs=True)
    assert preflight(settings) is None
    assert warnings(settings) == [INSECURE_VERBS_WARNING.format(port=8888)]


def test_the_serve_command_names_the_missing_client_ca(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAS_", "KUBERNETES_"))}
    certs = Certificates(tmp_path)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1", certs.ca_crt, token="t")
    done = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--kubeconfig", str(kubeconfig)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("error: in a cluster the extender verbs bind and evict pods: give --client-ca")


def test_a_client_ca_needs_a_serving_certificate_and_a_readable_file(tmp_path):
    assert "needs a serving certificate too" in preflight(Settings(client_ca="ca.crt"))
    certs = Certificates(tmp_path)
    serving = certs.issue("serving", "/CN=tas-extender", server=True)
    missing = preflight(Settings(client_ca=str(tmp_path / "nope.crt"), tls_cert=str(serving[0]),
                                 tls_key=str(serving[1])))
    assert missing.startswith(f"--client-ca {tmp_path / 'nope.crt'}: ")
    same = preflight(Settings(client_ca=str(certs.ca_crt), tls_cert=str(serving[0]), tls_key=str(serving[1]),
                              verbs_port=8888))
    assert same == "--verbs-port 8888 is --port too: the verbs need a port of their own"


def test_with_a_client_ca_the_main_port_has_no_verbs(tmp_path):
    certs = Certificates(tmp_path)
    serving = certs.issue("serving", "/CN=tas-extender", server=True)
    app = create_app(Settings(client_ca=str(certs.ca_crt), tls_cert=str(serving[0]), tls_key=str(serving[1])))
    main, verbs = TestClient(app), TestClient(app.state.listeners["verbs"])
    body = {"Pod": plain_pod("web"), "NodeNames": ["node-01"]}
    assert main.post("/scheduler/filter", json=body).status_code == 404
    assert verbs.post("/scheduler/filter", json=body).status_code == 200
    assert verbs.get("/debug/plans").status_code == 404 and main.get("/debug/plans").status_code == 200
    assert main.get("/readyz").status_code == 200 and main.get("/metrics").status_code == 200


def test_in_a_cluster_debug_and_ui_are_kept_off_the_main_port():
    from app.kube.parts import KubeConnection

    class Source:
        def start(self):
            pass

        def stop(self):
            pass

    app = create_app(Settings(kubeconfig="kubeconfig", insecure_verbs=True),
                     kube=lambda settings: KubeConnection(None, None, lambda sink: Source(), restore=False))
    main, debug = TestClient(app), TestClient(app.state.listeners["debug"])
    for path in ("/debug/plans", "/debug/search?q=x", "/ui"):
        assert main.get(path).status_code == 404, path
    assert debug.get("/debug/plans").status_code == 200 and debug.get("/ui").status_code == 200
    assert main.get("/metrics").status_code == 200 and main.get("/healthz").status_code == 200


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`tas-extender serve` on the demo with --client-ca: (main URL, verbs URL, the CA, a client certificate
    of that CA, a client certificate of another CA)."""
    folder = tmp_path_factory.mktemp("listeners")
    certs, stranger = Certificates(folder / "ca"), Certificates(folder / "other-ca")
    serving = certs.issue("serving", "/CN=tas-extender", server=True)
    client = certs.issue("scheduler", "/CN=tas-scheduler")
    forged = stranger.issue("scheduler", "/CN=tas-scheduler")
    port, verbs_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAS_", "KUBERNETES_"))}
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                                "--tls-cert", str(serving[0]), "--tls-key", str(serving[1]),
                                "--client-ca", str(certs.ca_crt), "--verbs-port", str(verbs_port),
                                "--log-level", "warning"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    main = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{main}/readyz", verify=_context(certs.ca_crt, None)).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and process.poll() is None, process.stderr.read1().decode()
            time.sleep(0.1)
        yield main, f"https://127.0.0.1:{verbs_port}", certs.ca_crt, client, forged
    finally:
        process.terminate()
        process.wait(10)


def _context(ca: Path, cert: tuple[Path, Path] | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert:
        context.load_cert_chain(*map(str, cert))
    return context


def test_the_verbs_answer_a_caller_with_a_client_certificate_of_the_ca(served):
    main, verbs, ca, client, _ = served
    assert httpx.post(f"{main}/debug/objects", json=plain_pod("web"), verify=_context(ca, None)).status_code == 200
    with httpx.Client(verify=_context(ca, client)) as http:
        answer = http.post(f"{verbs}/scheduler/filter", json={"Pod": plain_pod("web"), "NodeNames": ["node-01"]})
        assert answer.json()["NodeNames"] == ["node-01"]
        assert http.post(f"{verbs}/scheduler/bind", json={"PodName": "web", "PodNamespace": "default",
                                                           "PodUID": "uid-web", "Node": "node-01"}).json() == {"Error": ""}


@pytest.mark.parametrize("who", ["no certificate", "a certificate of another CA"])
def test_the_verbs_refuse_a_caller_without_a_certificate_of_the_ca_in_the_handshake(served, who):
    main, verbs, ca, _, forged = served
    with httpx.Client(verify=_context(ca, forged if who != "no certificate" else None)) as http:
        with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
            http.post(f"{verbs}/scheduler/bind", json={"PodName": "web", "PodNamespace": "default",
                                                        "PodUID": "uid-web", "Node": "node-02"})
    assert httpx.post(f"{main}/scheduler/bind", verify=_context(ca, None), json={}).status_code == 404   # not on the main port


@pytest.fixture
def uvicorn_loggers():
    """uvicorn.Config sets the levels of uvicorn's loggers for the whole process: put them back, or a later
    test's uvicorn server (the fake API server's) logs at shutdown through a handler whose stream is closed."""
    import logging
    loggers = [logging.getLogger(f"uvicorn{name}") for name in ("", ".error", ".access", ".asgi")]
    levels = [(logger, logger.level, logger.propagate, list(logger.handlers)) for logger in loggers]
    yield
    for logger, level, propagate, handlers in levels:
        logger.setLevel(level)
        logger.propagate, logger.handlers[:] = propagate, handlers


def test_the_service_serves_on_uvloop_as_uvicorn_run_would(monkeypatch, uvicorn_loggers):
    """`serve` runs its listeners in one loop of its own: that loop is uvloop's (uvicorn's `loop="auto"`), not
    the stdlib's that a plain asyncio.run gives (issue 31: the stdlib loop costs more CPU per request)."""
    import asyncio

    import uvloop

    from app import listeners

    seen = []

    async def serve_all(all_servers, tls=None):
        seen.append((type(asyncio.get_running_loop()), len(all_servers)))

    monkeypatch.setattr(listeners, "_serve_all", serve_all)
    listeners.run(create_app(Settings()), Settings())
    assert seen == [(uvloop.Loop, 1)]


def test_idle_connections_outlive_the_go_clients_idle_timeout(tmp_path, uvicorn_loggers):
    """kube-scheduler's extender client and the API server's webhook client keep idle connections 90 s (Go's
    http.DefaultTransport): every listener keeps them longer, so the client closes first (a server closing at
    uvicorn's default 5 s races the next POST, which Go does not replay, and costs a new TLS handshake)."""
    from app.listeners import servers

    certs = Certificates(tmp_path)
    cert, key = certs.issue("serving", "/CN=tas-extender", server=True)
    settings = Settings(kubeconfig="kubeconfig", tls_cert=str(cert), tls_key=str(key), client_ca=str(certs.ca_crt),
                        request_timeout=7)
    app = create_app(Settings())
    app.state.listeners.update(verbs=app, debug=app)           # as create_app keeps them apart in a cluster
    listening = servers(app, settings)
    assert len(listening) == 3 and all(server.config.timeout_keep_alive > 90 for server in listening)
    # and every listener closes a connection whose request does not arrive within --request-timeout (issue 40)
    assert all(issubclass(server.config.http, TimedHttpProtocol) and server.config.http.request_timeout == 7
               for server in listening)


class _RecordingTransport:
    """What an asyncio transport is told, in order."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.closing = False

    def write(self, data):
        self.calls.append(("write", bytes(data)))

    def close(self):
        self.calls.append(("close",))
        self.closing = True

    def is_closing(self):
        return self.closing

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8443)}.get(name, default)

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def get_write_buffer_size(self):
        return 0


def test_a_response_leaves_in_one_write_head_and_body_together(uvicorn_loggers):
    """uvicorn writes a response's head and body in two calls: over TLS two records, two encryptions and two
    sends per answer. The service's protocol sends what one turn of the loop wrote as one write (issue 39:
    bench_http_server.py --servers uvicorn-apart,uvicorn), in order, before the connection closes."""
    import asyncio

    import uvicorn
    from uvicorn.server import ServerState

    from app.listeners import timed_protocol

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"8")]})
        await send({"type": "http.response.body", "body": b"the body"})

    async def exchange(request: bytes) -> list[tuple]:
        config = uvicorn.Config(app, http=timed_protocol(5), lifespan="off", log_config=None)
        config.load()
        transport = _RecordingTransport()
        protocol = config.http_protocol_class(config=config, server_state=ServerState(), app_state={})
        protocol.connection_made(transport)
        protocol.data_received(request)
        for _ in range(20):
            await asyncio.sleep(0)
        return transport.calls

    calls = asyncio.run(exchange(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}"))
    assert [c[0] for c in calls] == ["write"]
    assert calls[0][1].startswith(b"HTTP/1.1 200 OK\r\n") and calls[0][1].endswith(b"\r\n\r\nthe body")
    # a request that closes the connection: the answer goes out whole, then the close
    calls = asyncio.run(exchange(b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"))
    assert [c[0] for c in calls] == ["write", "close"] and calls[0][1].endswith(b"the body")


def test_held_writes_go_out_before_the_stream_ends_or_changes_hands():
    from app.listeners import CoalescingTransport

    class Loop:
        def __init__(self):
            self.soon = []

        def call_soon(self, callback):
            self.soon.append(callback)

    loop, real = Loop(), _RecordingTransport()
    transport = CoalescingTransport(real, loop)
    transport.write(b"a")
    transport.write(memoryview(b"b"))
    assert real.calls == [] and transport.get_write_buffer_size() == 2
    transport.close()
    assert real.calls == [("write", b"ab"), ("close",)]
    for callback in loop.soon:              # the turn's flush finds nothing left
        callback()
    assert real.calls == [("write", b"ab"), ("close",)]
    assert transport.get_extra_info("peername") == ("127.0.0.1", 40000)     # everything else is the real one's
    # a big body is handed over as it is, in the same call as its head (never copied into one buffer)
    real.closing, real.calls, big = False, [], b"x" * 100_000
    transport.write(b"head")
    transport.write(big)
    real.writelines = lambda chunks: real.calls.append(("writelines", list(chunks)))
    transport.flush()
    assert real.calls == [("writelines", [b"head", big])] and real.calls[0][1][1] is big


def _connections(main: str, ca: Path, listener: str) -> float:
    text = httpx.get(f"{main}/metrics", verify=_context(ca, None)).text
    line = next((line for line in text.splitlines()
                 if line.startswith(f'tas_extender_connections_total{{listener="{listener}"}}')), None)
    return float(line.rsplit(" ", 1)[1]) if line else 0.0


def test_each_listener_counts_the_connections_it_accepts(served):
    """tas_extender_connections_total{listener}: over TLS each connection is a handshake, the costliest part of
    a request (issue 39: kube-scheduler keeps 2 idle connections to the verbs while more binds run at once)."""
    main, verbs, ca, client, _ = served
    before = _connections(main, ca, "verbs")
    with httpx.Client(verify=_context(ca, client)) as http:           # one connection, two requests
        for _ in range(2):
            assert http.post(f"{verbs}/scheduler/filter", json={"Pod": plain_pod("web"), "NodeNames": ["node-01"]}
                             ).status_code == 200
    with httpx.Client(verify=_context(ca, client)) as http:           # and another
        assert http.post(f"{verbs}/scheduler/filter", json={"Pod": plain_pod("web"), "NodeNames": []}).status_code == 200
    assert _connections(main, ca, "verbs") - before == 2
    assert _connections(main, ca, "main") >= 1                          # this test's own scrapes
