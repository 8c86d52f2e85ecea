"""Any other kind with a pod template (`spec.template`, `spec.replicas` or `spec.parallelism` pods): its
pods find it by their controller reference and carry an index only through pod-index-label. Custom kinds
named in --extra-kinds are grouped this way; it is the registry's fallback, not registered itself."""
from __future__ import annotations

from collections.abc import Mapping

from .base import RoleTemplate, WorkloadKind, WorkloadShape
from .fields import count_field, role
from .pods import indexed_pods


def roles(obj: Mapping) -> list[RoleTemplate]:
    spec = obj.get("spec") or {}
    template = spec.get("template")
    if not isinstance(template, Mapping):
        return []
    replicas_field = "spec.replicas" if "replicas" in spec else "spec.parallelism"
    replicas = count_field(obj, replicas_field, spec.get("replicas", spec.get("parallelism")), 1)
    return [role(obj, str(obj.get("kind") or "pod").lower(), "spec.template", "spec.template", replicas, template,
                 None)]


def pods(obj: Mapping, shape: WorkloadShape) -> list[dict]:
    return indexed_pods(obj, shape.roles[0], (obj.get("metadata") or {}).get("name"), {})


GENERIC = WorkloadKind("generic", (), None, roles=roles, pods=pods)
