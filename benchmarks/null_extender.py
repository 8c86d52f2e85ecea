"""The cheapest extender we can write: a filter verb over HTTPS that keeps the first candidate node, and
nothing else (no planning, no watches). `bench_e2e.py --null-extender` schedules plain pods through a
kube-scheduler that calls it, to measure what calling any filtering extender costs on this machine: an
upper bound for the throughput of a topology-aware one.

With API server credentials it also serves the bind verb as the service does: one Binding written per
pod, carrying placement annotations (`bench_e2e.py --null-bind`), so that the bound measures what any
binding extender costs here.

    python benchmarks/null_extender.py PORT CERT KEY [API_SERVER CA CLIENT_CERT CLIENT_KEY]
"""
from __future__ import annotations

import asyncio
import ssl
import sys

import orjson

_NO_NODE = b'{"NodeNames":[],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":"no candidate"}'
# as many as the service writes on a gang pod of the benchmark: its gang, slot, topology and one per level
PLACEMENT_ANNOTATIONS = {"tas-extender.io/gang": "bench-0/gang-0", "tas-extender.io/slot": "worker-0",
                         "placement.tas-extender.io/topology": "e2e",
                         "placement.tas-extender.io/zone": "zone-0", "placement.tas-extender.io/block": "block-0",
                         "placement.tas-extender.io/rack": "rack-0"}


def binding_request(body: bytes) -> tuple[str, bytes]:
    """(the API path, the Binding with placement annotations) for a bind verb's ExtenderBindingArgs."""
    args = orjson.loads(body)
    namespace, name = args["PodNamespace"], args["PodName"]
    binding = {"apiVersion": "v1", "kind": "Binding",
               "metadata": {"name": name, "uid": args["PodUID"], "annotations": PLACEMENT_ANNOTATIONS},
               "target": {"apiVersion": "v1", "kind": "Node", "name": args["Node"]}}
    return f"/api/v1/namespaces/{namespace}/pods/{name}/binding", orjson.dumps(binding)


def bind_answer(status: int, text: bytes) -> bytes:
    """The bind verb's ExtenderBindingResult for the API server's answer to the Binding."""
    return orjson.dumps({"Error": "" if status < 300 else text.decode(errors="replace")})


def filter_answer(body: bytes) -> bytes:
    names = orjson.loads(body).get("NodeNames") or []
    if not names:
        return _NO_NODE
    return orjson.dumps({"NodeNames": names[:1], "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
                         "Error": ""})


class Binder:
    """Writes Bindings over keep-alive HTTP/1.1 connections to the API server, by hand as the filter's
    server is: the least a Python extender can spend on a bind."""

    def __init__(self, server: str, ca: str, cert: str, key: str):
        self.host, _, port = server.removeprefix("https://").partition(":")
        self.port = int(port or 443)
        self.context = ssl.create_default_context(cafile=ca)
        self.context.load_cert_chain(cert, key)
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def answer(self, body: bytes) -> bytes:
        return bind_answer(*await self._post(*binding_request(body)))

    async def _post(self, path: str, body: bytes) -> tuple[int, bytes]:
        while self.idle:
            try:                    # a kept connection the API server may have closed meanwhile
                return await self._exchange(*self.idle.pop(), path, body)
            except (OSError, asyncio.IncompleteReadError):
                pass
        return await self._exchange(*await asyncio.open_connection(self.host, self.port, ssl=self.context),
                                    path, body)

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str,
                        body: bytes) -> tuple[int, bytes]:
        writer.write(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (path.encode(), self.host.encode(), len(body), body))
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:] if line)}
        if b"content-length" in fields:
            text = await reader.readexactly(int(fields[b"content-length"]))
        else:                                    # chunked
            text = b""
            while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
                text += (await reader.readexactly(size + 2))[:-2]
            await reader.readuntil(b"\r\n")
        self.idle.append((reader, writer))
        return int(lines[0].split()[1]), text


class Http11(asyncio.Protocol):
    """Keep-alive HTTP/1.1 with Content-Length bodies: what kube-scheduler's extender client sends (one
    request at a time per connection, so an answer written later is still in order)."""

    binder: "Binder | None" = None
    binds: set[asyncio.Task] = set()        # the loop keeps only weak references to tasks

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport, self.buffer = transport, b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].split(b"\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            body, self.buffer = self.buffer[head_end + 4:end], self.buffer[end:]
            if self.binder is not None and b"/bind" in head[0]:
                task = asyncio.ensure_future(self._bind(body))
                self.binds.add(task)
                task.add_done_callback(self.binds.discard)
            else:
                self._write(filter_answer(body))

    async def _bind(self, body: bytes) -> None:
        try:
            answer = await self.binder.answer(body)
        except Exception as error:     # noqa: BLE001 - kube-scheduler retries the pod
            print(f"bind failed: {error!r}", file=sys.stderr, flush=True)
            answer = orjson.dumps({"Error": f"bind failed: {error!r}"})
        self._write(answer)

    def _write(self, answer: bytes) -> None:
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                             % len(answer) + answer)


async def serve(port: int, cert: str, key: str, api: list[str]) -> None:
    if api:
        Http11.binder = Binder(*api)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = await asyncio.get_running_loop().create_server(Http11, "127.0.0.1", port, ssl=context)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        from uvloop import run      # the service's event loop
    except ImportError:
        run = asyncio.run
    run(serve(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:8]))
