"""The service with its verbs port on granian (HTTP/2 by ALPN and HTTP/1.1, HTTP and TLS in Rust) instead of
uvicorn: issue 39's third pass measured it and did not ship it (docs/benchmarks.md, "Issue 39, third pass").
`pip install granian` first (not a dependency of the service).

    python benchmarks/granian_verbs.py serve [serve's flags]          # as `tas-extender serve`, verbs on granian
    python benchmarks/granian_verbs.py python -P -m app.cli serve ... # as a launcher (TAS_E2E_WRAP): the same

bench_e2e.py --verbs-server granian launches the service through it. The main and debug listeners stay
uvicorn; the verbs listener (with --client-ca) is granian embedded in the service's event loop, behind
RequestDeadline (a request whose body has not arrived within --request-timeout is answered 408: granian
bounds only the head), its TLS files reloaded by a new granian worker on the same socket when TlsFiles sees
them change, its connections counted in tas_extender_connections_total{listener="verbs"} by client address.
"""
from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from app import listeners  # noqa: E402
from app.logs import fields, get_logger  # noqa: E402

log = get_logger("app.listeners.granian")

PEERS_KEPT = 65536                   # client addresses RequestDeadline remembers to count connections


class RequestDeadline:
    """ASGI middleware for a server that bounds only a request's head (granian): a request whose body has not
    arrived whole within `request_timeout` seconds of the request's start is answered 408 (over HTTP/1.1 with
    `Connection: close`, so the server closes the connection) and the app sees the client gone. Also counts
    the connections it sees (one per client address and port: `counted`), since granian reports none."""

    def __init__(self, app, request_timeout: float, counted: Callable[[], None] | None = None) -> None:
        self.app, self.request_timeout, self.counted = app, request_timeout, counted
        self.peers: set = set()
        self.http_versions: dict[str, int] = {}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        version = scope.get("http_version", "1.1")
        if version not in self.http_versions:
            log.info("verbs: the first request over this HTTP version", extra=fields(http_version=version))
        self.http_versions[version] = self.http_versions.get(version, 0) + 1
        peer = scope.get("client")
        if peer is not None and tuple(peer) not in self.peers:
            if len(self.peers) >= PEERS_KEPT:
                self.peers.clear()        # HTTP/1.1 callers' closed connections: counted, then forgotten
            self.peers.add(tuple(peer))
            if self.counted is not None:
                self.counted()
            log.debug("verbs: a new connection", extra=fields(client=list(peer), http_version=version))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout
        state = {"body": False, "started": False, "late": False}

        async def timed_receive():
            if state["body"] or state["late"]:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                state["late"] = True
                log.debug("answered 408 to a request whose body did not arrive within --request-timeout",
                          extra=fields(client=list(peer or ()), request_timeout=self.request_timeout))
                if not state["started"]:
                    state["started"] = True
                    headers = [(b"content-type", b"application/json"), (b"content-length", b"0")]
                    if version.startswith("1"):
                        headers.append((b"connection", b"close"))
                    await send({"type": "http.response.start", "status": 408, "headers": headers})
                    await send({"type": "http.response.body", "body": b""})
                return {"type": "http.disconnect"}
            if message["type"] == "http.request" and not message.get("more_body", False):
                state["body"] = True
            elif message["type"] == "http.disconnect":
                state["body"] = True
            return message

        async def guarded_send(message) -> None:
            if state["late"]:
                return                    # the 408 is the answer
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        try:
            await self.app(scope, timed_receive, guarded_send)
        except Exception:
            if not state["late"]:         # the app's own failure, as the server would see it
                raise


class GranianVerbs:
    """The verbs listener on granian (HTTP/1.1 and HTTP/2 by ALPN, TLS in Rust), in the service's event loop,
    behind RequestDeadline. Looks like a uvicorn.Server to _serve_all (`should_exit`, `_serve`). When the TLS
    files change (`reload`), granian starts a new worker on the same socket with the files as they are then,
    and stops the old one gracefully; while it drains, the old worker still accepts handshakes with the
    previous files (seconds: docs/benchmarks.md, issue 39 third pass), one reason this is not shipped."""

    def __init__(self, app, settings, tls, counted: Callable[[], None] | None = None) -> None:
        from granian.constants import HTTPModes, Interfaces
        from granian.http import HTTP1Settings
        from granian.server.embed import Server
        self.should_exit = False
        self.app = RequestDeadline(app, settings.request_timeout, counted)
        self._files = (Path(tls.cert), Path(tls.key), Path(tls.client_ca))
        level = "debug" if settings.log_level == "debug" else "warning"
        quiet = {"level": level, "handlers": [], "propagate": True}
        self.server = Server(
            self.app, settings.host, settings.verbs_port, interface=Interfaces.ASGINL, http=HTTPModes.auto,
            websockets=False, http1_settings=HTTP1Settings(header_read_timeout=int(settings.request_timeout * 1000)),
            ssl_cert=self._files[0], ssl_key=self._files[1], ssl_ca=self._files[2], ssl_client_verify=True,
            log_level=level, log_dictconfig={"loggers": {"_granian": quiet, "granian.access": quiet}})

    def reload(self) -> None:
        """Serve the TLS files as they are now: a new worker on the same socket, the old one stopped gracefully
        (paths resolved again: a Secret volume's `..data` link points to a new folder after an update)."""
        self.server.build_ssl_context(*self._files[:2], None, self.server.ssl_ctx[4], self._files[2], [], True)
        self.server.reload()

    async def _serve(self) -> None:
        async def stop_when_told():
            while not self.should_exit:
                await asyncio.sleep(0.1)
            self.server.stop()
        follower = asyncio.create_task(stop_when_told())
        try:
            await self.server.serve()
        finally:
            follower.cancel()


def install() -> None:
    """Patch app.listeners: the verbs server is GranianVerbs; a TLS reload also reloads it."""
    servers, serve_all = listeners.servers, listeners._serve_all       # noqa: SLF001

    def granian_servers(app, settings, tls=None):
        out = servers(app, settings, tls)
        verbs = app.state.listeners.get("verbs")
        if verbs is None:
            return out
        index = next(i for i, server in enumerate(out) if getattr(server, "config", None) is not None
                     and server.config.app is verbs)
        out[index] = GranianVerbs(verbs, settings, tls, app.state.service.metrics.connections.labels("verbs").inc)
        return out

    async def granian_serve_all(all_servers, tls=None):
        if tls is not None:
            reloads = [server.reload for server in all_servers if isinstance(server, GranianVerbs)]
            check = tls.check

            def check_and_reload() -> bool:
                changed = check()
                if changed:
                    for reload in reloads:
                        reload()
                return changed
            tls.check = check_and_reload
        await serve_all(all_servers, tls)

    listeners.servers, listeners._serve_all = granian_servers, granian_serve_all       # noqa: SLF001


def main(argv: list[str]) -> int:
    if "serve" not in argv:
        print(__doc__, file=sys.stderr)
        return 2
    install()
    from app.cli import main as cli
    return cli(argv[argv.index("serve"):])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
