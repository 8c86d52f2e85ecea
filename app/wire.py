"""Request bodies on the wire, shared by the extender verbs and the webhook: the errors a body can raise, and
pydantic validation errors as one line that names each bad field. (Reading a body within the size limit is
the HTTP layer's: app/http/body.py.)"""
from __future__ import annotations

from pydantic import ValidationError

MAX_PROBLEMS = 5


class BadRequest(ValueError):
    """A request the service cannot read; the message says what is wrong."""


class BodyTooLarge(BadRequest):
    pass


def describe_errors(error: ValidationError, root: str = "body") -> str:
    """`Pod: Pod.metadata.name is required; NodeNames.0: Input should be a valid string`."""
    problems = []
    for item in error.errors()[:MAX_PROBLEMS]:
        where = ".".join(str(part) for part in item["loc"]) or root
        problems.append(f"{where}: {item['msg'].removeprefix('Value error, ')}")
    return "; ".join(problems)
