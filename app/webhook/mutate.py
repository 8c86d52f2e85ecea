"""What the webhook injects into a pod of a grouped workload, as JSON Patch operations.

- labels `kai.scheduler/subgroup-name` (the leaf SubGroup) and `kai.scheduler/segment-index`;
- annotation `pod-group-name` (the PodGroup / gang name);
- on every container and init container: KAI_SEGMENT_INDEX / _SIZE / _RANK and KAI_NUM_SEGMENTS, and one
  downward-API env var per topology level (KAI_TOPOLOGY_RACK, ...) resolved by the kubelet from the
  placement annotations the extender writes at bind;
- optionally spec.schedulerName.

Everything is computed against the pod as it is, so a second pass over a patched pod adds nothing.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from app.placement import TOPOLOGY_ANNOTATION, downward_api_path, placement_annotation, placement_env_name
from grouper.names import KAI_PODGROUP_ANNOTATION, KAI_SEGMENT_INDEX_LABEL, KAI_SUBGROUP_LABEL
from topology.tree import TopologyTree

from . import patch

SEGMENT_INDEX_ENV = "KAI_SEGMENT_INDEX"
SEGMENT_SIZE_ENV = "KAI_SEGMENT_SIZE"
SEGMENT_RANK_ENV = "KAI_SEGMENT_RANK"
NUM_SEGMENTS_ENV = "KAI_NUM_SEGMENTS"
TOPOLOGY_NAME_ENV = "KAI_TOPOLOGY_NAME"
DEFAULT_SCHEDULER = "default-scheduler"
CONTAINER_LISTS = ("initContainers", "containers")


@dataclass
class Mutation:
    operations: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Injection:
    """What a pod should carry, independent of what it already has."""

    labels: dict[str, str]
    annotations: dict[str, str]
    env: list[dict]
    scheduler_name: str | None = None


def injection_for(identity, tree: TopologyTree | None, scheduler_name: str | None = None,
                  membership: bool = True) -> Injection:
    """The labels, annotations and env vars for a pod with this identity (a grouper PodIdentity).
    `membership=False` leaves out the PodGroup / SubGroup keys: pods of an explicit PodGroup name
    their group themselves (KAI annotation and label, or scheduler-plugins' label)."""
    labels, annotations = {}, {}
    if membership:
        if identity.subgroup:
            labels[KAI_SUBGROUP_LABEL] = identity.subgroup
        if identity.segment is not None:
            labels[KAI_SEGMENT_INDEX_LABEL] = str(identity.segment.index)
        if identity.podgroup_name:
            annotations[KAI_PODGROUP_ANNOTATION] = identity.podgroup_name
    return Injection(labels, annotations, segment_env(identity) + placement_env(tree), scheduler_name)


def segment_env(identity) -> list[dict]:
    segment = identity.segment
    if segment is None:
        return []
    values = {SEGMENT_INDEX_ENV: segment.index, SEGMENT_SIZE_ENV: segment.size,
              SEGMENT_RANK_ENV: identity.rank, NUM_SEGMENTS_ENV: segment.count}
    return [{"name": name, "value": str(value)} for name, value in values.items() if value is not None]


def placement_env(tree: TopologyTree | None) -> list[dict]:
    """Downward-API env vars for the topology name and the domain at every level.

    They resolve when the container starts, from annotations the extender writes before the binding; a
    pod placed by another scheduler gets empty values.
    """
    if tree is None:
        return []
    pairs = [(TOPOLOGY_NAME_ENV, TOPOLOGY_ANNOTATION)]
    pairs += [(placement_env_name(level), placement_annotation(level)) for level in tree.levels]
    seen: set[str] = set()
    env = []
    for name, annotation in pairs:
        if name not in seen:
            seen.add(name)
            env.append({"name": name, "valueFrom": {"fieldRef": {
                "apiVersion": "v1", "fieldPath": downward_api_path(annotation)}}})
    return env


def pod_mutation(pod: Mapping, injection: Injection) -> Mutation:
    """The operations that make `pod` carry `injection`, and notes about values we override or keep."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    mutation = Mutation()
    for map_name, wanted in (("labels", injection.labels), ("annotations", injection.annotations)):
        current = metadata.get(map_name)
        mutation.warnings += _overridden(current, wanted, map_name[:-1])
        mutation.operations += patch.set_entries(current, ["metadata", map_name], wanted)
    for list_name in CONTAINER_LISTS:
        for index, container in enumerate(spec.get(list_name) or ()):
            current_env = container.get("env")
            mutation.warnings += _kept_env(container, current_env, injection.env, list_name)
            mutation.operations += patch.append_env(current_env, ["spec", list_name, index, "env"], injection.env)
    if injection.scheduler_name:
        mutation.operations += _scheduler_name(spec.get("schedulerName"), injection.scheduler_name, mutation)
    return mutation


def _overridden(current: Mapping | None, wanted: Mapping[str, str], what: str) -> list[str]:
    return [f"{what} {key}={current[key]!r} replaced by {value!r} (set by the grouping of this workload)"
            for key, value in wanted.items() if current and key in current and current[key] != value]


def _kept_env(container: Mapping, current: Sequence[Mapping] | None, wanted: Sequence[Mapping],
              list_name: str) -> list[str]:
    """Env vars the user already defines with another value: theirs is kept, and we say so."""
    if not current:
        return []
    by_name = {var.get("name"): var for var in current}
    notes = []
    for var in wanted:
        existing = by_name.get(var["name"])
        if existing is not None and _env_source(existing) != _env_source(var):
            where = "init container" if list_name == "initContainers" else "container"
            notes.append(f"{where} {container.get('name')!r} already sets {var['name']}; "
                         f"kept its value instead of {_env_source(var)}")
    return notes


def _env_source(var: Mapping) -> str:
    if "valueFrom" in var and var["valueFrom"]:
        field_ref = var["valueFrom"].get("fieldRef") or {}
        return f"fieldRef {field_ref.get('fieldPath')}" if field_ref else "valueFrom"
    return repr(var.get("value", ""))


def _scheduler_name(current: str | None, wanted: str, mutation: Mutation) -> list[dict]:
    if current and current not in (DEFAULT_SCHEDULER, wanted):
        mutation.warnings.append(f"spec.schedulerName={current!r} kept; the topology extender only places "
                                 f"pods of {wanted!r}")
        return []
    return patch.set_value(current, ["spec", "schedulerName"], wanted)
