"""Who may call what: the listeners of `tas-extender serve` and the routes each one serves (issue 33).

- main  (--host:--port; HTTPS with --tls-cert): the webhook (the API server calls it), /healthz, /readyz and
  /metrics (aggregate counters only: no pod, gang or namespace names). In standalone mode also everything
  else, in plain HTTP unless --tls-cert: the demo works with curl.
- verbs (--host:--verbs-port, when --client-ca is given): the extender verbs <--url-prefix>/*, over TLS that
  requires a client certificate signed by --client-ca (kube-scheduler's extender tlsConfig certFile/keyFile).
  A caller without one fails in the TLS handshake, before any request is read. A port of their own keeps
  the rule simple: every connection to it is authenticated, none to the main port needs a certificate (the
  API server calls the webhook without one, the kubelet probes without one).
- debug (127.0.0.1:--debug-port, in cluster mode): /debug/* and /ui, for whoever may
  `kubectl port-forward` to the pod (RBAC `pods/portforward` in its namespace). They show pods of every
  namespace: in a cluster they are never on a port the network reaches.

In cluster mode the service refuses to start without --client-ca unless --insecure-verbs says otherwise;
then the verbs stay on the main port, open to whoever reaches it, and every start logs a warning.

A leader sent SIGTERM hands over before it stops (`hand_over_on_exit`): it releases its Lease, keeps every
listener answering until another replica holds the Lease (at most --handover-timeout) and --handover-drain
seconds more while the Service moves to that replica, then shuts down as uvicorn does. A second signal stops
it at once. A standby stops at once.

Every listener serves the TLS files through one `TlsFiles` (app/certificates.py), which reloads them when
they change, and closes a connection whose request (head and body) has not arrived within --request-timeout
(issue 40): uvicorn bounds only the idle time between requests, not the time a request takes to arrive.
"""
from __future__ import annotations

import asyncio
import signal
import ssl
import threading
import time
from collections.abc import Callable, Iterable

from fastapi import APIRouter, FastAPI
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .certificates import TlsFiles
from .logs import fields, get_logger
from .settings import Settings

log = get_logger(__name__)

INSECURE_VERBS_WARNING = ("--insecure-verbs: the extender verbs (bind, preempt) answer any caller that reaches "
                          "port {port} without a client certificate; anyone who can reach it can bind pods of "
                          "this scheduler's profiles. Give --client-ca FILE to require kube-scheduler's certificate")


# Idle connections stay open longer than kube-scheduler's and the API server's Go clients keep theirs (90 s,
# http.DefaultTransport's IdleConnTimeout), so the client closes first. With uvicorn's 5 s a quiet spell
# closed them: the next pods paid new TLS handshakes (mutual TLS on the verbs port), and a POST sent on a
# connection just being closed fails (Go does not replay a POST), failing that scheduling attempt.
KEEP_ALIVE = 120


def verbs_apart(settings: Settings) -> bool:
    """The verbs are served on their own port, to callers with a client certificate only."""
    return bool(settings.client_ca)


def debug_apart(settings: Settings) -> bool:
    """/debug and /ui are served on loopback only (cluster mode)."""
    return settings.mode == "kubernetes"


def sub_app(service, title: str, routers: Iterable[APIRouter], engine=None) -> FastAPI:
    """An app over the same ServiceState and engine as the main one, without its lifespan (the main app
    runs the background parts once for all listeners)."""
    app = FastAPI(title=title, version="0.1.0", openapi_url=None, docs_url=None, redoc_url=None)
    app.state.service = service
    app.state.engine = engine
    for router in routers:
        app.include_router(router)
    return app


def addresses(settings: Settings) -> list[tuple[str, int, str]]:
    """(host, port, the flags that set them) of every listener this configuration opens."""
    out = [(settings.host, settings.port, f"--host {settings.host} --port {settings.port}")]
    if verbs_apart(settings):
        out.append((settings.host, settings.verbs_port, f"--host {settings.host} --verbs-port {settings.verbs_port}"))
    if debug_apart(settings):
        out.append(("127.0.0.1", settings.debug_port, f"--debug-port {settings.debug_port} (on 127.0.0.1)"))
    return out


def preflight(settings: Settings) -> str | None:
    """What of the listeners would stop the service at start, as one line naming the flag."""
    if settings.client_ca:
        if not settings.tls_cert:
            return (f"--client-ca {settings.client_ca}: the verbs port needs a serving certificate too "
                    f"(--tls-cert and --tls-key)")
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_verify_locations(settings.client_ca)
        except (OSError, ssl.SSLError) as err:
            return f"--client-ca {settings.client_ca}: {getattr(err, 'strerror', None) or err}"
        if settings.verbs_port == settings.port:
            return f"--verbs-port {settings.verbs_port} is --port too: the verbs need a port of their own"
    elif settings.mode == "kubernetes" and not settings.insecure_verbs:
        return ("in a cluster the extender verbs bind and evict pods: give --client-ca FILE (TAS_CLIENT_CA), the "
                "CA that signs kube-scheduler's client certificate, so that only kube-scheduler may call them; "
                "or --insecure-verbs to serve them to any caller that reaches the port")
    if debug_apart(settings) and settings.debug_port in (settings.port, settings.verbs_port if settings.client_ca
                                                         else None):
        return f"--debug-port {settings.debug_port} is already taken by --port or --verbs-port"
    return None


def warnings(settings: Settings) -> list[str]:
    """What every start of this configuration logs as a warning."""
    if settings.mode == "kubernetes" and not settings.client_ca and settings.insecure_verbs:
        return [INSECURE_VERBS_WARNING.format(port=settings.port)]
    return []


JOIN_LIMIT = 65536                   # held writes up to this size are joined into one; larger ones are not copied


class CoalescingTransport:
    """A transport whose writes within one turn of the event loop go out as one: uvicorn writes a response's
    head and its body in two calls, which over TLS makes two records, two encryptions and two sends (on
    loopback each send also runs the receiver's side in the kernel). Every call but `write` goes to the real
    transport; anything that ends or inspects the stream (`close`, `write_eof`, the buffer size, a protocol
    change) sends what is held first, so the bytes keep their order."""

    def __init__(self, transport, loop) -> None:
        self._transport, self._loop = transport, loop
        self._held: list[bytes] = []

    def write(self, data) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(bytes(data))

    def writelines(self, chunks) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        if not self._held:
            return
        held, self._held = self._held, []
        if self._transport.is_closing():
            return
        if len(held) == 1:
            self._transport.write(held[0])
        elif sum(map(len, held)) <= JOIN_LIMIT:
            self._transport.write(b"".join(held))
        else:                          # a big body is not copied: one send of several records
            self._transport.writelines(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = []
        self._transport.abort()

    def set_protocol(self, protocol) -> None:
        self.flush()
        self._transport.set_protocol(protocol)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._held))

    def __getattr__(self, name):
        return getattr(self._transport, name)


class TimedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing a connection whose request has not arrived whole (head and body)
    within `request_timeout` seconds of the connection's start or of the request's first byte. uvicorn bounds
    only the idle time after a response (timeout_keep_alive): a client announcing a body it never sends
    otherwise holds its connection, and its request, forever. Once a request has arrived, how long the
    answer takes is not bounded here."""

    request_timeout: float = 10.0
    counted: Callable[[], None] | None = None            # told of each connection accepted (the metric)

    def connection_made(self, transport) -> None:
        super().connection_made(CoalescingTransport(transport, self.loop))
        if self.counted is not None:
            self.counted()
        self._deadline = self.loop.call_later(self.request_timeout, self._request_too_slow)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:                       # the next request of a kept-alive connection
            self._deadline = self.loop.call_later(self.request_timeout, self._request_too_slow)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._cancel_deadline()

    def connection_lost(self, exc) -> None:
        self._cancel_deadline()
        super().connection_lost(exc)

    def handle_websocket_upgrade(self) -> None:
        self._cancel_deadline()                          # the connection is the websocket protocol's now
        super().handle_websocket_upgrade()

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _request_too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.debug("closed a connection whose request did not arrive within --request-timeout",
                      extra=fields(client=self.client, request_timeout=self.request_timeout))
            self.transport.close()


def timed_protocol(request_timeout: float, counted: Callable[[], None] | None = None) -> type[TimedHttpProtocol]:
    return type("TimedHttpProtocol", (TimedHttpProtocol,), {"request_timeout": request_timeout,
                                                            "counted": staticmethod(counted) if counted else None})


def tls_files(settings: Settings) -> TlsFiles | None:
    """The TLS files every listener serves (none: plain HTTP)."""
    if not settings.tls_cert:
        return None
    return TlsFiles(settings.tls_cert, settings.tls_key, settings.client_ca)


def servers(app: FastAPI, settings: Settings, tls: TlsFiles | None = None) -> list:
    """The uvicorn servers of `app` (main first) and of the apps it keeps apart (app.state.listeners), serving
    the contexts of `tls` (the reloaded TLS files)."""
    import uvicorn

    # no X-Forwarded-* rewriting: nothing reads the client's address, and kube-scheduler and the API server
    # call directly (uvicorn's ProxyHeadersMiddleware would otherwise wrap every call)
    connections = app.state.service.metrics.connections
    common = {"log_config": None, "log_level": settings.log_level, "access_log": False, "proxy_headers": False,
              "timeout_keep_alive": KEEP_ALIVE}

    def http(listener: str) -> dict:
        return {"http": timed_protocol(settings.request_timeout, connections.labels(listener).inc)}

    main_tls = {"ssl_context_factory": lambda *_: tls.server_context()} if tls else {}
    out = [uvicorn.Server(uvicorn.Config(app, host=settings.host, port=settings.port, **main_tls, **common,
                                         **http("main")))]
    verbs, debug = app.state.listeners.get("verbs"), app.state.listeners.get("debug")
    if verbs is not None:                   # only with --client-ca, which needs --tls-cert
        out.append(uvicorn.Server(uvicorn.Config(
            verbs, host=settings.host, port=settings.verbs_port, lifespan="off",
            ssl_context_factory=lambda *_: tls.mutual_context(), **common, **http("verbs"))))
    if debug is not None:
        out.append(uvicorn.Server(uvicorn.Config(debug, host="127.0.0.1", port=settings.debug_port,
                                                 lifespan="off", **common, **http("debug"))))
    return out


def watch_tls(app: FastAPI, settings: Settings, tls: TlsFiles) -> None:
    """Each certificate's expiry in /metrics, and /readyz unready within --tls-expiry-margin of the serving
    certificate's end."""
    service = app.state.service
    service.metrics.registry.register(tls)
    service.readiness_checks.append(lambda: tls.problem(settings.tls_expiry_margin))


def run(app: FastAPI, settings: Settings) -> None:
    """Serve every listener in one event loop until SIGTERM / SIGINT (the main server catches them)."""
    for warning in warnings(settings):
        log.warning(warning)
    tls = tls_files(settings)
    if tls is not None:
        watch_tls(app, settings, tls)
    all_servers = servers(app, settings, tls)
    hand_over_on_exit(all_servers[0], getattr(app.state, "service", None), settings)
    with asyncio.Runner(loop_factory=loop_factory(all_servers[0].config)) as runner:
        runner.run(_serve_all(all_servers, tls))


def hand_over_on_exit(main, state, settings: Settings) -> None:
    """The first SIGTERM or SIGINT to a leader hands its Lease over before `main` (which the other listeners
    follow) shuts down; see the module's docstring. Without leader election, the signal goes straight to
    uvicorn."""
    elector = getattr(state, "elector", None)
    if not settings.leader_elect or elector is None or not hasattr(elector, "hand_over"):
        return
    exit_now = main.handle_exit
    first = threading.Event()

    def hand_over() -> None:
        try:
            if elector.hand_over(settings.handover_timeout) is not None:
                time.sleep(settings.handover_drain)
        finally:
            exit_now(signal.SIGTERM, None)

    def handle_exit(sig, frame) -> None:
        if first.is_set():
            exit_now(sig, frame)
            return
        first.set()
        threading.Thread(target=hand_over, name="hand-over", daemon=True).start()

    main.handle_exit = handle_exit


def loop_factory(config):
    """The event loop uvicorn.run would choose (`loop="auto"`: uvloop when installed). A plain asyncio.run
    would take the stdlib loop: its selector and transports cost the service about a third more CPU per
    request than uvloop's (issue 31)."""
    return config.get_loop_factory()


async def _serve_all(all_servers: list, tls: TlsFiles | None = None) -> None:
    main, *others = all_servers
    watcher = asyncio.create_task(tls.watch_forever()) if tls is not None else None

    async def others_follow_main():
        while not main.should_exit:
            await asyncio.sleep(0.1)
        for server in others:
            server.should_exit = True

    async def main_follows(server):
        try:
            await server._serve()       # noqa: SLF001 - serve() would take over the signal handlers
        finally:
            main.should_exit = True      # a listener that stops (a port taken) stops the service

    try:
        await asyncio.gather(main.serve(), others_follow_main(), *(main_follows(s) for s in others))
    finally:
        if watcher is not None:
            watcher.cancel()
