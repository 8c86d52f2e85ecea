"""A slow client cannot hold a listener (issue 40, item 2): a request whose head or body has not arrived within
--request-timeout (TAS_REQUEST_TIMEOUT) has its connection closed, on every listener; other callers, and a
kept-alive connection idle between its requests, are not affected. Before, a POST announcing
Content-Length: 1000 that sent 7 bytes still had no answer and an open connection after 70 s."""
from __future__ import annotations

import socket
import time

import orjson
import pytest

from serving_helpers import Certificates, client_context, free_port, http_post, serving, tls_connect
from service_helpers import plain_pod

TIMEOUT = 2.0                 # the tests' --request-timeout; the default is 10 s
FILTER = orjson.dumps({"Pod": plain_pod("web"), "NodeNames": ["node-01"]})
SLOW_STARTS = {
    "a body cut short": b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 1000\r\n\r\n{\"Pod\":",
    "a head cut short": b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Le",
    "nothing at all": b"",
}


@pytest.fixture(scope="module")
def service():
    with serving("--log-level", "warning", env={"TAS_REQUEST_TIMEOUT": str(TIMEOUT)}) as (process, port):
        yield port


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes `sock` (after whatever answer it sends) within `seconds`."""
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except socket.timeout:
        return False
    except ConnectionResetError:
        pass
    return True


def slow_connection(port: int, start: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(start)
    return sock


@pytest.mark.parametrize("what", list(SLOW_STARTS))
def test_a_request_that_does_not_arrive_in_time_has_its_connection_closed(service, what):
    sock = slow_connection(service, SLOW_STARTS[what])
    started = time.monotonic()
    assert closed_within(sock, TIMEOUT + 20), f"{what}: still open"
    assert time.monotonic() - started >= TIMEOUT - 0.5, "closed before --request-timeout"


def test_a_kept_alive_connection_idle_between_requests_is_not_closed(service):
    sock = socket.create_connection(("127.0.0.1", service), timeout=10)
    assert http_post(sock, "/scheduler/filter", FILTER).startswith(b"HTTP/1.1 200")
    time.sleep(TIMEOUT + 1)           # longer than --request-timeout, shorter than the keep-alive of 120 s
    assert http_post(sock, "/scheduler/filter", FILTER).startswith(b"HTTP/1.1 200")


def test_a_body_sent_in_pieces_within_the_bound_is_answered(service):
    sock = socket.create_connection(("127.0.0.1", service), timeout=10)
    head = (f"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(FILTER)}\r\n\r\n").encode()
    sock.sendall(head + FILTER[:10])
    time.sleep(TIMEOUT / 4)
    sock.sendall(FILTER[10:])
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")


def test_a_hundred_slow_clients_do_not_stop_the_verbs(service):
    slow = [slow_connection(service, SLOW_STARTS[list(SLOW_STARTS)[i % 2]]) for i in range(100)]
    caller = socket.create_connection(("127.0.0.1", service), timeout=10)
    for _ in range(20):
        answer = http_post(caller, "/scheduler/filter", FILTER)
        assert answer.startswith(b"HTTP/1.1 200") and b'"Error":""' in answer
    deadline = time.monotonic() + TIMEOUT + 30
    assert all(closed_within(sock, max(0.1, deadline - time.monotonic())) for sock in slow)
    assert http_post(caller, "/scheduler/filter", FILTER).startswith(b"HTTP/1.1 200")


def test_the_verbs_port_closes_a_slow_client_after_its_handshake(tmp_path):
    certs = Certificates(tmp_path)
    cert, key = certs.issue("serving", "/CN=tas-extender", server=True)
    client = certs.issue("scheduler", "/CN=tas-scheduler")
    verbs_port = free_port()
    with serving("--tls-cert", str(cert), "--tls-key", str(key), "--client-ca", str(certs.ca_crt),
                 "--verbs-port", str(verbs_port), "--request-timeout", str(TIMEOUT),
                 ready_context=client_context(certs.ca_crt)):
        slow = tls_connect(verbs_port, client_context(certs.ca_crt, client))
        slow.sendall(SLOW_STARTS["a body cut short"])
        caller = tls_connect(verbs_port, client_context(certs.ca_crt, client))
        assert http_post(caller, "/scheduler/filter", FILTER).startswith(b"HTTP/1.1 200")
        assert closed_within(slow, TIMEOUT + 20)

