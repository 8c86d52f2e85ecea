"""Reading a workload's fields, for the kinds' role builders: counts and mappings with errors that name the
field, a role from a pod template, its index label."""
from __future__ import annotations

import re
from collections.abc import Mapping

from topology.resources import pod_requests

from .. import names
from ..errors import GroupingError, describe, invalid
from .base import RoleTemplate, WorkloadShape


def annotations_of(obj: Mapping) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


MAX_PODS = 100_000      # pods of one workload: more than a 10,000-node cluster holds, far from exhausting memory
_INTEGER = re.compile(r"[+-]?[0-9]+")


def parse_int(value) -> int | None:
    """A decimal integer written as text (an annotation or label value), as Go's strconv.Atoi reads it:
    no underscores, no other digits than 0-9; None when it is not one."""
    text = str(value).strip()
    return int(text) if _INTEGER.fullmatch(text) else None


def count_field(obj: Mapping, field: str, value, default: int, minimum: int = 0) -> int:
    """An integer count from a spec field (None -> default), with an error naming the field."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise invalid(obj, field, value, f"expected an integer >= {minimum}")
    return value


def mapping_field(obj: Mapping, field: str, value) -> Mapping:
    """A spec field that must be a mapping (None -> empty), with an error naming the field."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise invalid(obj, field, value, "expected a mapping")
    return value


def role(owner: Mapping, name: str, field: str, template_field: str, replicas: int, template: Mapping,
          default_index_label: str | None, index_offset: int = 0) -> RoleTemplate:
    """A role whose pods carry their index in the template's pod-index-label, else the default."""
    return RoleTemplate(name, field, template_field, replicas, template,
                        _index_label(owner, template, default_index_label, template_field), index_offset)


def _index_label(obj: Mapping, template: Mapping, default: str | None, path: str) -> str | None:
    """The pod-index-label annotation (pod template first, then the workload root), else the default."""
    check_fields(obj, f"{path}.", template, ("metadata", "spec"))
    metadata = template.get("metadata") or {}
    check_fields(obj, f"{path}.metadata.", metadata, ("labels", "annotations"))
    template_annotations = metadata.get("annotations") or {}
    label = template_annotations.get(names.POD_INDEX_LABEL) or annotations_of(obj).get(names.POD_INDEX_LABEL)
    return label or default


def suspended(workload: Mapping) -> bool:
    """A suspended workload (a Job, JobSet or RayJob `spec.suspend`, a kubeflow job or MPIJob
    `spec.runPolicy.suspend`) has its pods deleted and makes no replacements until it is resumed; Kueue
    preempts and requeues workloads this way."""
    spec = workload.get("spec")
    if not isinstance(spec, Mapping):
        return False
    run_policy = spec.get("runPolicy")
    return spec.get("suspend") is True or (isinstance(run_policy, Mapping) and run_policy.get("suspend") is True)


def check_requests(workload: Mapping, shape: WorkloadShape) -> None:
    """Each role's pod template has requests the planner can read; a GroupingError naming the field
    otherwise (the API server validates pod templates of built-in kinds, not of every custom resource)."""
    for role in shape.roles:
        spec = mapping_field(workload, f"{role.template_field}.spec", role.template.get("spec"))
        try:
            pod_requests(spec)
        except ValueError as err:           # RequestError, QuantityError: the message names the field
            raise GroupingError(f"{describe(workload)}: {role.template_field}.{err}") from None


def check_fields(owner: Mapping, path: str, container: Mapping, fields: tuple[str, ...]) -> None:
    """Each of the container's `fields` is a mapping or unset; a GroupingError naming `path`+field otherwise."""
    for field_name in fields:
        mapping_field(owner, path + field_name, container.get(field_name))
