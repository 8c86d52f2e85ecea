"""The one error the grouper raises: bad user input, with a message that says what to fix."""
from __future__ import annotations

from collections.abc import Mapping


class GroupingError(ValueError):
    """A workload or PodGroup that cannot be grouped. The message names the object, the field or
    annotation, the bad value and what would be valid."""


class UnresolvedLevelError(GroupingError):
    """A required level given without kai.scheduler/topology that no served topology, or several, have:
    never dropped, so the gang is refused; the webhook admits its pods with a warning (a Topology made
    later can resolve it)."""


def describe(obj: Mapping) -> str:
    """`Kind namespace/name` of an object, for messages."""
    metadata = obj.get("metadata") or {}
    if not isinstance(metadata, Mapping):         # the caller's check names the bad field
        metadata = {}
    namespace = metadata.get("namespace") or "default"
    name = metadata.get("name") or metadata.get("generateName") or "<unnamed>"
    return f"{obj.get('kind') or 'object'} {namespace}/{name}"


def invalid(obj: Mapping, field: str, value, valid: str) -> GroupingError:
    return GroupingError(f"{describe(obj)}: {field}={value!r} is invalid; {valid}")
