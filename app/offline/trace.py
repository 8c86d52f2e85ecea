"""Reading a simulation trace: JSON Lines of `{"at": s, "duration": s, "workload": <manifest>}`.

Every error names the file, the line and the field, so a bad line in a long trace is easy to find.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from ..files import read_text

FIELDS = ("at", "duration", "workload")


class TraceError(ValueError):
    """A trace that cannot be read; the message names the line and the field."""


@dataclass(frozen=True)
class TraceEntry:
    line: int                 # 1-based line number in the trace file
    at: float                 # submission time, seconds
    duration: float           # how long the workload holds its pods once placed
    workload: dict            # the workload manifest

    @property
    def key(self) -> str:
        metadata = self.workload.get("metadata") or {}
        return f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"


def read_trace(path: str | Path) -> list[TraceEntry]:
    """The entries of a trace file, in file order."""
    text = read_text(path, "trace file", TraceError)
    return parse_trace(text.splitlines(), source=str(path))


def parse_trace(lines: Iterable[str], source: str = "trace") -> list[TraceEntry]:
    entries: list[TraceEntry] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        entry = _parse_line(line, number, source)
        if entry.key in seen:
            raise TraceError(f"{source} line {number}: workload {entry.key} repeats the name used on "
                             f"line {seen[entry.key]}; each workload needs its own namespace/name")
        seen[entry.key] = number
        entries.append(entry)
    return entries


def _parse_line(line: str, number: int, source: str) -> TraceEntry:
    where = f"{source} line {number}"
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as err:
        raise TraceError(f"{where}: not valid JSON ({err})") from err
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: expected an object with fields {', '.join(FIELDS)}, "
                         f"got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        raise TraceError(f"{where}: unknown field {unknown[0]!r}; valid fields: {', '.join(FIELDS)}")
    at = _seconds(obj, "at", where, allow_zero=True)
    duration = _seconds(obj, "duration", where, allow_zero=False)
    workload = obj.get("workload")
    if not isinstance(workload, dict):
        raise TraceError(f"{where}: field 'workload' must be a workload manifest (an object), "
                         f"got {_describe(workload)}")
    _check_manifest(workload, where)
    return TraceEntry(number, at, duration, workload)


MAX_SECONDS = 1e9       # about 31 years: far beyond any trace, far below where sums of times lose precision


def _seconds(obj: Mapping, field: str, where: str, allow_zero: bool) -> float:
    if field not in obj:
        raise TraceError(f"{where}: missing field {field!r} (seconds)")
    value = obj[field]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TraceError(f"{where}: field {field!r} must be a number of seconds, got {_describe(value)}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise TraceError(f"{where}: field {field!r} must be {bound}, got {value}")
    if value > MAX_SECONDS:
        raise TraceError(f"{where}: field {field!r} must be at most {MAX_SECONDS:g} seconds (about 31 years), "
                         f"got {value:g}")
    return float(value)


def _check_manifest(workload: Mapping, where: str) -> None:
    for field in ("apiVersion", "kind"):
        if not isinstance(workload.get(field), str) or not workload.get(field):
            raise TraceError(f"{where}: field 'workload.{field}' is required")
    metadata = workload.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str) or not metadata["name"]:
        raise TraceError(f"{where}: field 'workload.metadata.name' is required")


def _describe(value) -> str:
    if value is None:
        return "null"
    return f"{type(value).__name__} {orjson.dumps(value).decode()[:60]}"
