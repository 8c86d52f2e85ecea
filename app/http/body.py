"""Reading a request body within the size limit (--max-request-bytes), for the extender verbs and the
webhook."""
from __future__ import annotations

from fastapi import Request

from ..wire import BodyTooLarge


async def read_limited(request: Request, limit: int) -> bytes:
    """The whole body, or BodyTooLarge as soon as it (or its declared Content-Length) passes `limit`."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body of {declared} bytes exceeds the limit of {limit} bytes "
                           f"(--max-request-bytes / TAS_MAX_REQUEST_BYTES)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"request body exceeds the limit of {limit} bytes "
                               f"(--max-request-bytes / TAS_MAX_REQUEST_BYTES)")
        chunks.append(chunk)
    return b"".join(chunks)
