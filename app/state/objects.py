"""The latest version of every watched object, by kind, namespace and name (the owner-lookup cache)."""
from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence

from topology.nodes import placement_problem
from topology.resources import pod_requests

from ..ports import EventType, WatchedKind


def _key(obj: Mapping) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or "", metadata.get("name") or ""


class ObjectCache:
    """Thread-safe store fed by a source; readers get the stored dicts (treat them as read-only).
    Tables are kept per Kind, then per API group: a lookup by Kind (every owner lookup, every pod the
    verbs meet) reads one small map instead of scanning every watched kind."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._tables: dict[str, dict[str, dict[tuple[str, str], Mapping]]] = {}    # kind -> group -> table

    def replace(self, kind: WatchedKind, objects: Sequence[Mapping]) -> None:
        with self._lock:
            self._tables.setdefault(kind.kind, {})[kind.group] = {_key(o): o for o in objects}

    def apply(self, kind: WatchedKind, event: EventType, obj: Mapping) -> None:
        with self._lock:
            table = self._tables.setdefault(kind.kind, {}).setdefault(kind.group, {})
            if event == "DELETED":
                table.pop(_key(obj), None)
            else:
                table[_key(obj)] = obj

    def get(self, kind: str, namespace: str | None, name: str, group: str | None = None) -> Mapping | None:
        """An object by Kind ("PyTorchJob"), namespace ("" or None for cluster-scoped) and name.
        With several API groups for one Kind (PodGroup, Topology), `group` picks one; else the first found."""
        key = (namespace or "", name)
        with self._lock:
            for table in self._of(kind, group):
                found = table.get(key)
                if found is not None:
                    return found
        return None

    def list(self, kind: str, group: str | None = None) -> Iterator[Mapping]:
        with self._lock:
            items = [o for table in self._of(kind, group) for o in table.values()]
        return iter(items)

    def _of(self, kind: str, group: str | None) -> list[dict[tuple[str, str], Mapping]]:
        groups = self._tables.get(kind) or {}
        if group is None:
            return list(groups.values())
        table = groups.get(group)
        return [] if table is None else [table]


def metadata_problem(metadata: Mapping, where: str) -> str | None:
    """What makes an object's metadata unreadable (names and versions not strings, labels or annotations
    not maps of strings, owner references without apiVersion, kind and name), named under `where`."""
    get = metadata.get
    for field_name in ("name", "generateName", "namespace", "uid", "resourceVersion"):
        if not _absent_or(get(field_name), str):
            return f"{where}.metadata.{field_name} must be a string"
    for field_name in ("labels", "annotations"):
        entries = get(field_name)
        if entries is not None and (not _is_map(entries) or not all(isinstance(v, str) for v in entries.values())):
            return f"{where}.metadata.{field_name} must be a map of strings"
    references = get("ownerReferences")
    if references is None:
        return None
    if not isinstance(references, list) or not all(_is_map(r) for r in references):
        return f"{where}.metadata.ownerReferences must be a list of objects"
    for i, reference in enumerate(references):
        for field_name in ("apiVersion", "kind", "name", "uid"):
            value = reference.get(field_name)
            if not (_absent_or(value, str) if field_name == "uid" else isinstance(value, str)):
                return f"{where}.metadata.ownerReferences[{i}].{field_name} must be a string"
    return None


def pod_shape_problem(pod: Mapping, where: str) -> str | None:
    """What makes `pod` unreadable, named by its path under `where` ("Pod", "request.object"); None when
    fine. The API server only ever sends schema-valid pods: this turns a hand-made or corrupted one into
    a clear refusal instead of a crash deep in the grouper. (`_is_map` tests a JSON-decoded dict by its exact
    type, the common case, before the slower ABC check.)"""
    for field_name in ("metadata", "spec", "status"):
        if not _absent_or_map(pod.get(field_name)):
            return f"{where}.{field_name} must be an object"
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    problem = metadata_problem(metadata, where)
    if problem:
        return problem
    if not isinstance(spec.get("nodeName") or "", str):
        return f"{where}.spec.nodeName must be a string"
    placement = placement_problem(spec, f"{where}.spec")
    if placement:
        return placement
    for list_name in ("initContainers", "containers"):
        containers = spec.get(list_name) or []
        if not isinstance(containers, list) or not all(_is_map(c) for c in containers):
            return f"{where}.spec.{list_name} must be a list of containers"
        for container in containers:
            env = container.get("env")
            if env is not None:
                if not isinstance(env, list) or not all(_is_map(var) for var in env):
                    return f"{where}.spec.{list_name}[].env must be a list of objects (name, value)"
                if not all(isinstance(var.get("name"), str) and var["name"] for var in env):
                    return f"{where}.spec.{list_name}[].env[].name must be a non-empty string"
            resources = container.get("resources") or {}
            if not _is_map(resources) or not all(
                    _is_map(resources.get(k) or {}) for k in ("requests", "limits")):
                return f"{where}.spec.{list_name}[].resources must hold maps of requests and limits"
    try:
        pod_requests(spec)
    except ValueError as err:                # RequestError, QuantityError: the message names the field
        return f"{where}.{err}"
    return None


def _is_map(value) -> bool:
    return type(value) is dict or isinstance(value, Mapping)


def _absent_or_map(value) -> bool:
    return value is None or _is_map(value)


def _absent_or(value, kind: type) -> bool:
    """Unset (None) or of `kind`: the code reading a field takes `value or {}`, but a patch built from the
    pod writes into the field as it is, so an empty list where a map belongs must be refused too."""
    return value is None or isinstance(value, kind)
