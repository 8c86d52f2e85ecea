"""The cheapest extender we can write: a filter verb over HTTPS that keeps the first candidate node, and
nothing else (no planning, no watches, no bind). `bench_e2e.py --null-extender` schedules plain pods
through a kube-scheduler that calls it, to measure what calling any filtering extender costs on this
machine: an upper bound for the throughput of a topology-aware one.

    python benchmarks/null_extender.py PORT CERT KEY
"""
from __future__ import annotations

import asyncio
import ssl
import sys

import orjson

_NO_NODE = b'{"NodeNames":[],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":"no candidate"}'


def filter_answer(body: bytes) -> bytes:
    names = orjson.loads(body).get("NodeNames") or []
    if not names:
        return _NO_NODE
    return orjson.dumps({"NodeNames": names[:1], "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
                         "Error": ""})


class Http11(asyncio.Protocol):
    """Keep-alive HTTP/1.1 with Content-Length bodies: what kube-scheduler's extender client sends."""

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport, self.buffer = transport, b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            length = 0
            for line in self.buffer[:head_end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            body, self.buffer = self.buffer[head_end + 4:end], self.buffer[end:]
            answer = filter_answer(body)
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                                 % len(answer) + answer)


async def serve(port: int, cert: str, key: str) -> None:
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
    run(serve(int(sys.argv[1]), sys.argv[2], sys.argv[3]))
