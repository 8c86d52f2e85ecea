"""The registry of workload kinds, and the lookups everyone derives from it: the kind of a workload, the
owner of a pod, what the service watches, the webhook's list of kinds that number their pods.

A kind is a module of this package defining a WorkloadKind: the registry finds it there, so adding a kind is
adding its file (and its ClusterRole line). Kinds are ordered by owner_rank (the order in which a pod looks
for its owner), then by file name; that is also the order of the watch and of the webhook's list."""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from pathlib import Path

from topology.objects import api_group

from ..errors import GroupingError, describe
from . import base
from .base import OwnerRef, WatchedKind, WorkloadKind, WorkloadShape
from .fields import MAX_PODS, check_fields
from .generic import GENERIC
from .pods import controlled_by, controller_owner


def _found() -> list[WorkloadKind]:
    """Every WorkloadKind a module of this package defines (generic.py's fallback aside), by owner_rank, then
    by module name and order of definition."""
    found = []
    for module in sorted(info.name for info in pkgutil.iter_modules([str(Path(__file__).parent)])):
        for value in vars(importlib.import_module(f"{__package__}.{module}")).values():
            if isinstance(value, WorkloadKind) and value is not GENERIC and value not in found:
                found.append(value)
    return sorted(found, key=lambda workload_kind: workload_kind.owner_rank)


KINDS: list[WorkloadKind] = _found()
_by_group: dict[tuple[str | None, str], WorkloadKind] = {}
_by_name: dict[str, WorkloadKind] = {}
_owner_steps: list = []          # the kinds' owner lookups in order, neighbouring controller lookups merged
_apart_steps: list = []          # the kinds' apart_gang lookups, for those that have one


def _index() -> None:
    _by_group.clear()
    _by_name.clear()
    for workload_kind in KINDS:
        for name in workload_kind.kinds:
            _by_group.setdefault((workload_kind.group, name), workload_kind)
            _by_name.setdefault(name, workload_kind)
    _apart_steps[:] = [k.apart_gang for k in KINDS if k.apart_gang is not base.unknown]
    _owner_steps.clear()
    for workload_kind in KINDS:
        step = workload_kind.owner
        if step is None:
            continue
        before = getattr(_owner_steps[-1], "controller_kinds", None) if _owner_steps else None
        if before and getattr(step, "controller_kinds", None):
            _owner_steps[-1] = controlled_by(*before, *step.controller_kinds)
        else:
            _owner_steps.append(step)


def register(workload_kind: WorkloadKind) -> WorkloadKind:
    """Add a kind defined elsewhere (a plugin, a test), in its owner_rank's place."""
    if workload_kind not in KINDS:
        KINDS.append(workload_kind)
        KINDS.sort(key=lambda known: known.owner_rank)
        _index()
    return workload_kind


def unregister(workload_kind: WorkloadKind) -> None:
    if workload_kind in KINDS:
        KINDS.remove(workload_kind)
        _index()


def kind_of(workload: Mapping) -> WorkloadKind:
    """The registered kind of an object by its API group and Kind; the generic kind otherwise."""
    name = workload.get("kind")
    return _by_group.get((api_group(workload), name)) or _by_group.get((None, name)) or GENERIC


def kind_named(name: str | None) -> WorkloadKind | None:
    """The first registered kind with this Kind name, whatever its group (a reference without apiVersion)."""
    return _by_name.get(name) if name else None


def watched() -> tuple[WatchedKind, ...]:
    """The API resources the registered kinds are listed and watched by."""
    return tuple(api for workload_kind in KINDS for api in workload_kind.watch)


def numbering_kinds() -> str:
    """The webhook's list of the kinds that number their pods themselves."""
    return ", ".join(k.numbers_pods for k in KINDS if k.numbers_pods)


def owner_of(pod: Mapping) -> OwnerRef | None:
    """The workload (Job, kubeflow job, LeaderWorkerSet, JobSet, other controller) or the PodGroup
    a pod belongs to; None for a bare pod outside any PodGroup."""
    for step in _owner_steps:
        found = step(pod)
        if found is not None:
            return found
    return controller_owner(pod)


def always_apart(kind: str | None) -> bool:
    """Whether gangs of this Kind always count as kept apart from an exclusive gang."""
    workload_kind = kind_named(kind)
    return workload_kind is not None and workload_kind.always_apart


def apart_gang(pod: Mapping) -> str | None:
    """The gang a pod belongs to by its kind's own exclusivity labels (None: no kind says)."""
    for step in _apart_steps:
        found = step(pod)
        if found is not None:
            return found
    return None


def workload_shape(workload: Mapping) -> WorkloadShape:
    """The workload's roles (pod templates and their pods), as its kind reads them."""
    check_fields(workload, "", workload, ("metadata", "spec"))
    check_fields(workload, "metadata.", workload.get("metadata") or {}, ("labels", "annotations"))
    workload_kind = kind_of(workload)
    shape = WorkloadShape(workload_kind, workload_kind.roles(workload),
                          workload_kind.gangs(workload) if workload_kind.gangs else 1)
    pods = shape.groups * sum(role.replicas for role in shape.roles)
    if pods > MAX_PODS:
        counts = ", ".join(f"{role.field}: {role.replicas}" for role in shape.roles)
        groups = f" x {shape.groups} groups" if shape.groups > 1 else ""
        raise GroupingError(f"{describe(workload)}: {pods} pods ({counts}{groups}) is more than one workload can "
                            f"have here; expected at most {MAX_PODS}")
    return shape


def family_of(workload: Mapping) -> str:
    return kind_of(workload).name


_index()
