"""RFC 6902 JSON Patch operations against a pod, built only for what is missing or different.

Every builder looks at the current object first, so running it again over an already-patched pod yields
no operation (webhook reinvocation must not add an env var or a label twice).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

Operation = dict


def escape(token: str) -> str:
    """One JSON Pointer reference token (RFC 6901): `~` becomes `~0`, then `/` becomes `~1`."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    return "".join("/" + escape(str(token)) for token in tokens)


def set_entries(current: Mapping | None, path: Sequence[str | int], entries: Mapping[str, str]) -> list[Operation]:
    """Make the string map at `path` (labels, annotations) hold `entries`.

    A missing map is created whole (a JSON Patch `add` below a missing member fails); otherwise one
    `add` per key that is absent or has another value (`add` on an existing member replaces it).
    """
    if not entries:
        return []
    if current is None:
        return [{"op": "add", "path": pointer(*path), "value": dict(entries)}]
    return [{"op": "add", "path": pointer(*path, key), "value": value}
            for key, value in entries.items() if current.get(key) != value]


def set_value(current: object, path: Sequence[str | int], value: object) -> list[Operation]:
    """Set one member (e.g. spec.schedulerName) unless it already has that value."""
    if current == value:
        return []
    return [{"op": "add", "path": pointer(*path), "value": value}]


def append_env(current: Sequence[Mapping] | None, path: Sequence[str | int],
               variables: Sequence[Mapping]) -> list[Operation]:
    """Append the env vars whose names the container does not define yet (`path` points at its `env`).

    Names already present are left alone, whatever their value: never two entries of one name.
    """
    present = {var.get("name") for var in current or ()}
    missing = []
    for var in variables:
        if var["name"] not in present:
            present.add(var["name"])
            missing.append(dict(var))
    if not missing:
        return []
    if current is None:
        return [{"op": "add", "path": pointer(*path), "value": missing}]
    return [{"op": "add", "path": pointer(*path, "-"), "value": var} for var in missing]


def add_gate(current: Sequence[Mapping] | None, gate: str) -> list[Operation]:
    """Add scheduling gate `gate` to spec.schedulingGates unless the pod carries it."""
    if any(entry.get("name") == gate for entry in current or ()):
        return []
    if not current:
        return [{"op": "add", "path": pointer("spec", "schedulingGates"), "value": [{"name": gate}]}]
    return [{"op": "add", "path": pointer("spec", "schedulingGates", "-"), "value": {"name": gate}}]
