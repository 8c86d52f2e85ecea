"""A workload kind added the way docs/architecture.md says: this one file (and, in a real install, its line in
the ClusterRole). A Trainer has `spec.workers` pods of one template; its controller labels each pod with the
trainer's name and the worker's rank, and creates them all at once."""
from __future__ import annotations

from collections.abc import Mapping

from grouper.kinds import OwnerRef, RoleTemplate, WatchedKind, WorkloadKind, WorkloadShape
from grouper.kinds.fields import count_field, mapping_field, role
from grouper.kinds.pods import indexed_pods, labels_of

NAME_LABEL = "example.com/trainer-name"
RANK_LABEL = "example.com/rank"


def roles(trainer: Mapping) -> list[RoleTemplate]:
    spec = trainer.get("spec") or {}
    workers = count_field(trainer, "spec.workers", spec.get("workers"), 1)
    template = mapping_field(trainer, "spec.template", spec.get("template"))
    return [role(trainer, "worker", "spec.template", "spec.template", workers, template, RANK_LABEL)]


def owner(pod: Mapping) -> OwnerRef | None:
    name = labels_of(pod).get(NAME_LABEL)
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    return OwnerRef("example.com/v1", "Trainer", namespace, name) if name else None


def pods(trainer: Mapping, shape: WorkloadShape) -> list[dict]:
    name = trainer["metadata"]["name"]
    return indexed_pods(trainer, shape.roles[0], name, {NAME_LABEL: name})


TRAINER = WorkloadKind(
    "trainer", ("Trainer",), "example.com",
    watch=(WatchedKind("example.com", "v1", "trainers", "Trainer", True),),
    roles=roles, owner=owner, pods=pods, all_at_once=lambda trainer: True,
    numbers_pods="example.com/v1 Trainer",
)
