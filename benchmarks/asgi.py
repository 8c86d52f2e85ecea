"""Call an ASGI app in-process with one POST, so no client library is in the measured time."""
from __future__ import annotations

import asyncio


async def post(app, path: str, body: bytes, scheme: str = "http") -> bytes:
    """The response body of POST `path` with a JSON `body`."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": scheme, "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
             "server": ("bench", 443 if scheme == "https" else 80), "client": ("bench", 1), "app": app}
    chunks: list[bytes] = []
    delivered = False

    async def receive():
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return b"".join(chunks)
