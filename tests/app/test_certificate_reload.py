"""Certificates renew without a restart (issue 40, item 1): the listeners serve the TLS files as they are now
(new handshakes get the renewed serving certificate and are checked against the new client CA, open
connections finish on the old ones), a Secret's `..data` swap is noticed, files that do not load keep the
previous ones, each certificate's notAfter is a metric, and /readyz turns unready near the serving
certificate's end. Real certificates (openssl) and real handshakes throughout."""
from __future__ import annotations

import asyncio
import os
import ssl
import threading
import time
from contextlib import contextmanager

import httpx
import orjson
import pytest
import uvloop
from fastapi.testclient import TestClient

from app.certificates import TlsFiles
from app.listeners import watch_tls
from app.server import create_app
from app.settings import Settings
from serving_helpers import (Certificates, SecretDir, client_context, free_port, http_get, http_post, peer_serial,
                             serial_of, serving, tls_connect)
from service_helpers import plain_pod


@pytest.fixture
def pki(tmp_path):
    """Two CAs; a serving certificate of the first; a later one of the same CA; a client certificate of each."""
    first, second = Certificates(tmp_path / "ca1"), Certificates(tmp_path / "ca2")
    return {"ca1": first.ca_crt, "ca2": second.ca_crt,
            "serving": first.issue("serving", "/CN=tas-extender", server=True),
            "renewed": first.issue("renewed", "/CN=tas-extender", server=True),
            "client1": first.issue("scheduler", "/CN=tas-scheduler"),
            "client2": second.issue("scheduler", "/CN=tas-scheduler")}


def secret_files(pki, serving="serving", client_ca="ca1") -> dict:
    cert, key = pki[serving]
    return {"tls.crt": cert, "tls.key": key, "ca.crt": pki[client_ca]}


@contextmanager
def echo_server(context: ssl.SSLContext):
    """A TLS echo server on uvloop (the service's loop and TLS transport), in a thread: yields its port."""
    loop = uvloop.new_event_loop()
    ready = threading.Event()
    port = []

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.transport.write(data)

    async def main():
        server = await loop.create_server(Echo, "127.0.0.1", 0, ssl=context)
        port.append(server.sockets[0].getsockname()[1])
        ready.set()
        try:
            await server.serve_forever()
        except asyncio.CancelledError:
            server.close()

    task = loop.create_task(main())
    thread = threading.Thread(target=loop.run_until_complete, args=(task,), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield port[0]
    finally:
        loop.call_soon_threadsafe(task.cancel)
        thread.join(10)


def echoes(sock: ssl.SSLSocket) -> bool:
    try:
        sock.sendall(b"ping")
        return sock.recv(4) == b"ping"
    except (ssl.SSLError, OSError):
        return False


def test_new_handshakes_get_the_renewed_serving_certificate_and_open_ones_go_on(tmp_path, pki):
    secret = SecretDir(tmp_path / "secret", secret_files(pki))
    tls = TlsFiles(secret["tls.crt"], secret["tls.key"])
    trust = client_context(pki["ca1"])
    with echo_server(tls.server_context()) as port:
        before = tls_connect(port, trust)
        assert peer_serial(before) == serial_of(pki["serving"][0]) and echoes(before)
        assert tls.check() is False                              # nothing changed
        secret.update(secret_files(pki, serving="renewed"))
        assert tls.check() is True
        after = tls_connect(port, trust)
        assert peer_serial(after) == serial_of(pki["renewed"][0]) and echoes(after)
        assert echoes(before), "the connection opened before the reload still works"
    assert tls.reloads == {"ok": 1, "failed": 0}


def test_a_new_client_ca_decides_new_handshakes_only(tmp_path, pki):
    secret = SecretDir(tmp_path / "secret", secret_files(pki))
    tls = TlsFiles(secret["tls.crt"], secret["tls.key"], secret["ca.crt"])
    with echo_server(tls.mutual_context()) as port:
        old_client = tls_connect(port, client_context(pki["ca1"], pki["client1"]))
        assert echoes(old_client)
        assert not echoes(tls_connect(port, client_context(pki["ca1"], pki["client2"])))
        secret.update(secret_files(pki, client_ca="ca2"))
        assert tls.check() is True
        assert not echoes(tls_connect(port, client_context(pki["ca1"], pki["client1"]))), "the old CA is gone"
        assert echoes(tls_connect(port, client_context(pki["ca1"], pki["client2"])))
        assert echoes(old_client), "the connection authenticated before the reload still works"


def test_files_that_do_not_load_keep_the_previous_certificate_until_they_change_again(tmp_path, pki):
    secret = SecretDir(tmp_path / "secret", secret_files(pki))
    tls = TlsFiles(secret["tls.crt"], secret["tls.key"])
    mismatched = {"tls.crt": pki["renewed"][0], "tls.key": pki["serving"][1], "ca.crt": pki["ca1"]}
    with echo_server(tls.server_context()) as port:
        secret.update(mismatched)
        assert tls.check() is False and tls.reloads == {"ok": 0, "failed": 1}
        assert tls.check() is False and tls.reloads["failed"] == 1         # tried once per change
        assert peer_serial(tls_connect(port, client_context(pki["ca1"]))) == serial_of(pki["serving"][0])
        assert tls.certificates[0].serial == format(serial_of(pki["serving"][0]), "x")
        secret.update(secret_files(pki, serving="renewed"))
        assert tls.check() is True
        assert peer_serial(tls_connect(port, client_context(pki["ca1"]))) == serial_of(pki["renewed"][0])


def test_a_touch_that_changes_no_byte_reloads_nothing(tmp_path, pki):
    secret = SecretDir(tmp_path / "secret", secret_files(pki))
    tls = TlsFiles(secret["tls.crt"], secret["tls.key"], secret["ca.crt"])
    secret.update(secret_files(pki))                    # a new ..data with the same bytes
    os.utime(secret["tls.crt"])
    assert tls.check() is False and tls.reloads == {"ok": 0, "failed": 0}


def test_expiry_metrics_and_readiness_follow_the_serving_certificate(tmp_path, pki):
    secret = SecretDir(tmp_path / "secret", secret_files(pki))
    now = [time.time()]
    tls = TlsFiles(secret["tls.crt"], secret["tls.key"], secret["ca.crt"], clock=lambda: now[0])
    settings = Settings(tls_cert=secret["tls.crt"], tls_key=secret["tls.key"], client_ca=secret["ca.crt"],
                        tls_expiry_margin=600)
    app = create_app(settings)
    watch_tls(app, settings, tls)
    client = TestClient(app)
    metrics = client.get("/metrics").text
    leaf, ca = tls.certificates
    assert (leaf.role, ca.role) == ("serving", "client-ca") and ca.subject == "CN=e2e-ca"
    for cert in (leaf, ca):
        line = next(line for line in metrics.splitlines()
                    if line.startswith("tas_extender_certificate_expiry_timestamp_seconds{")
                    and f'serial="{cert.serial}"' in line and f'role="{cert.role}"' in line)
        assert float(line.rsplit(" ", 1)[1]) == pytest.approx(cert.not_after)
    assert abs(leaf.not_after - (time.time() + 2 * 86400)) < 3600          # openssl -days 2
    assert client.get("/readyz").status_code == 200
    now[0] = leaf.not_after - 599
    answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["reason"].startswith(f"the serving certificate {secret['tls.crt']} expires in 599 s")
    assert "--tls-expiry-margin 600 s" in answer.json()["reason"]
    now[0] = leaf.not_after + 1
    assert "expired" in client.get("/readyz").json()["reason"]


def test_the_service_reloads_a_mounted_secret_on_every_tls_listener(tmp_path, pki):
    """`serve` with the files of a Secret volume: after kubelet's `..data` swap, new handshakes on the main port
    get the renewed certificate and the verbs port checks the new client CA, while a keep-alive connection of
    kube-scheduler opened before goes on answering; the reload is logged and the metric follows."""
    secret = SecretDir(tmp_path / "secret", secret_files(pki))
    verbs_port = free_port()
    filter_body = orjson.dumps({"Pod": plain_pod("web"), "NodeNames": ["node-01"]})
    with serving("--tls-cert", secret["tls.crt"], "--tls-key", secret["tls.key"], "--client-ca", secret["ca.crt"],
                 "--verbs-port", str(verbs_port), ready_context=client_context(pki["ca1"])) as (process, port):
        scheduler = tls_connect(verbs_port, client_context(pki["ca1"], pki["client1"]))
        assert http_post(scheduler, "/scheduler/filter", filter_body).startswith(b"HTTP/1.1 200")
        secret.update(secret_files(pki, serving="renewed", client_ca="ca2"))
        deadline = time.monotonic() + 60
        while peer_serial(tls_connect(port, client_context(pki["ca1"]))) != serial_of(pki["renewed"][0]):
            assert time.monotonic() < deadline, "the renewed certificate was never served"
            time.sleep(0.5)
        answer = http_post(scheduler, "/scheduler/filter", filter_body)
        assert answer.startswith(b"HTTP/1.1 200") and b'"Error":""' in answer
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            http_get(tls_connect(verbs_port, client_context(pki["ca1"], pki["client1"])), "/scheduler/filter")
        fresh = tls_connect(verbs_port, client_context(pki["ca1"], pki["client2"]))
        assert http_post(fresh, "/scheduler/filter", filter_body).startswith(b"HTTP/1.1 200")
        metrics = httpx.get(f"https://127.0.0.1:{port}/metrics", verify=client_context(pki["ca1"])).text
        assert f'serial="{serial_of(pki["renewed"][0]):x}"' in metrics
        assert f'serial="{serial_of(pki["ca2"]):x}"' in metrics and f'serial="{serial_of(pki["ca1"]):x}"' not in metrics
    assert "TLS files reloaded" in process.log


def test_a_handshake_sends_no_session_tickets_nobody_resumes_with(tmp_path, pki):
    """The callers (kube-scheduler's extender client, the API server's webhook client, probes) are Go clients
    without a session cache: TLS 1.3 session tickets are never used, so the listeners send none (issue 39:
    making and sending OpenSSL's 2 per handshake cost about a tenth of a new mutual-TLS connection)."""
    cert, key = pki["serving"]
    tls = TlsFiles(str(cert), str(key), str(pki["ca1"]))
    for context, client in ((tls.server_context(), client_context(pki["ca1"])),
                            (tls.mutual_context(), client_context(pki["ca1"], pki["client1"]))):
        with echo_server(context) as port, tls_connect(port, client) as sock:
            assert echoes(sock)                       # the tickets, if any, came with the first answer
            assert sock.version() == "TLSv1.3"
            assert sock.session is None or not sock.session.has_ticket
    # what OpenSSL does by default, for contrast: the same exchange brings a ticket
    default = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    default.load_cert_chain(str(cert), str(key))
    with echo_server(default) as port, tls_connect(port, client_context(pki["ca1"])) as sock:
        assert echoes(sock) and sock.session is not None and sock.session.has_ticket
