"""Request bodies on the wire, shared by the extender verbs and the webhook: reading one within the size
limit, and pydantic validation errors as one line that names each bad field."""
from __future__ import annotations

from fastapi import Request
from pydantic import ValidationError

MAX_PROBLEMS = 5


class BadRequest(ValueError):
    """A request the service cannot read; the message says what is wrong."""


class BodyTooLarge(BadRequest):
    pass


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


def describe_errors(error: ValidationError, root: str = "body") -> str:
    """`Pod: Pod.metadata.name is required; NodeNames.0: Input should be a valid string`."""
    problems = []
    for item in error.errors()[:MAX_PROBLEMS]:
        where = ".".join(str(part) for part in item["loc"]) or root
        problems.append(f"{where}: {item['msg'].removeprefix('Value error, ')}")
    return "; ".join(problems)
