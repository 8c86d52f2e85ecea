"""batch/v1 Job: one role; an Indexed Job numbers its pods in job-completion-index."""
from __future__ import annotations

from collections.abc import Mapping

from .. import names
from .base import RoleTemplate, WatchedKind, WorkloadKind, WorkloadShape
from .fields import count_field, mapping_field, role
from .pods import controlled_by, make_pod, owner_reference


def roles(job: Mapping) -> list[RoleTemplate]:
    spec = job.get("spec") or {}
    parallelism = count_field(job, "spec.parallelism", spec.get("parallelism"), 1)
    completions = spec.get("completions")
    if completions is not None:
        parallelism = min(parallelism, count_field(job, "spec.completions", completions, 1))
    template = mapping_field(job, "spec.template", spec.get("template"))
    default_label = names.JOB_INDEX if spec.get("completionMode") == "Indexed" else None
    return [role(job, "job", "spec.template", "spec.template", parallelism, template, default_label)]


def pods(job: Mapping, shape: WorkloadShape) -> list[dict]:
    metadata = job.get("metadata") or {}
    name, uid = metadata.get("name"), metadata.get("uid") or ""
    [the_role] = shape.roles
    made = []
    for index in the_role.indexes():
        labels = {names.JOB_NAME: name, "job-name": name, names.JOB_CONTROLLER_UID: uid, "controller-uid": uid}
        annotations = {}
        if the_role.index_label == names.JOB_INDEX:
            labels[names.JOB_INDEX] = annotations[names.JOB_INDEX] = str(index)
        elif the_role.index_label:
            labels[the_role.index_label] = str(index)
        made.append(make_pod(job, the_role, f"{name}-{index}", labels, annotations, owner_reference(job)))
    return made


def still_to_run(job: Mapping) -> int | None:
    """Completions not yet succeeded: the controller never creates more pods than that (the last pods of a
    Job with completions above its parallelism)."""
    completions = (job.get("spec") or {}).get("completions")
    succeeded = (job.get("status") or {}).get("succeeded") or 0
    if not isinstance(completions, int) or not isinstance(succeeded, int):
        return None
    return max(completions - succeeded, 1)


JOB = WorkloadKind(
    "job", ("Job",), "batch",
    watch=(WatchedKind("batch", "v1", "jobs", "Job", True),),
    roles=roles, owner=controlled_by("Job"), owner_rank=20, pods=pods,
    all_at_once=lambda job: True, still_to_run=still_to_run,
    numbers_pods="Indexed batch/v1 Job",
)
