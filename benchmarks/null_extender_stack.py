"""null_extender.py on the service's own stack: uvicorn (uvloop, httptools) serving a bare ASGI app (no
FastAPI, no middleware), and binds written through a urllib3 pool in worker threads, as the service's
client writes them (`bench_e2e.py --null-bind --null-stack`). The same answers as null_extender.py: the
first candidate, and one Binding per pod with placement annotations. What is left between it and the
hand-written null extender is the cost of the stack itself.

    python benchmarks/null_extender_stack.py PORT CERT KEY API_SERVER CA CLIENT_CERT CLIENT_KEY
"""
from __future__ import annotations

import asyncio
import sys

import urllib3
import uvicorn

from null_extender import bind_answer, binding_request, filter_answer


class Binder:
    def __init__(self, server: str, ca: str, cert: str, key: str):
        self.server = server
        self.pool = urllib3.PoolManager(maxsize=16, ca_certs=ca, cert_file=cert, key_file=key)

    def answer(self, body: bytes) -> bytes:
        path, binding = binding_request(body)
        response = self.pool.request("POST", self.server + path, body=binding,
                                     headers={"Content-Type": "application/json"})
        return bind_answer(response.status, response.data)


def make_app(binder: Binder):
    async def app(scope, receive, send) -> None:
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if scope["path"].endswith("/bind"):
            answer = await asyncio.to_thread(binder.answer, body)
        else:
            answer = filter_answer(body)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer})
    return app


if __name__ == "__main__":
    port, cert, key, *api = sys.argv[1:]
    uvicorn.run(make_app(Binder(*api)), host="127.0.0.1", port=int(port), ssl_certfile=cert, ssl_keyfile=key,
                loop="uvloop", http="httptools", lifespan="off", access_log=False, log_level="warning")
