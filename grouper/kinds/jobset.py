"""JobSet: one role per replicated job; pods find it by its name label and their role by the
replicated-job label. Its pods carry an index only through pod-index-label."""
from __future__ import annotations

from collections.abc import Mapping

from .. import names
from .base import OwnerRef, RoleTemplate, WatchedKind, WorkloadKind, WorkloadShape
from ..errors import invalid
from .fields import count_field, mapping_field, role
from .pods import indexed_pods, labels_of

KIND = "JobSet"


def roles(jobset: Mapping) -> list[RoleTemplate]:
    made = []
    replicated_jobs = (jobset.get("spec") or {}).get("replicatedJobs") or []
    if not isinstance(replicated_jobs, list):
        raise invalid(jobset, "spec.replicatedJobs", replicated_jobs, "expected a list of replicated jobs")
    for i, replicated in enumerate(replicated_jobs):
        path = f"spec.replicatedJobs[{i}]"
        replicated = mapping_field(jobset, path, replicated)
        job_template = mapping_field(jobset, f"{path}.template", replicated.get("template"))
        job_spec = mapping_field(jobset, f"{path}.template.spec", job_template.get("spec"))
        replicas = count_field(jobset, f"{path}.replicas", replicated.get("replicas"), 1)
        parallelism = count_field(jobset, f"{path}.template.spec.parallelism", job_spec.get("parallelism"), 1)
        template = mapping_field(jobset, f"{path}.template.spec.template", job_spec.get("template"))
        name = replicated.get("name") or f"job-{i}"
        template_field = f"{path}.template.spec.template"
        made.append(role(jobset, name, template_field, template_field, replicas * parallelism, template, None))
    return made


def owner(pod: Mapping) -> OwnerRef | None:
    name = labels_of(pod).get(names.JOBSET_NAME)
    if not name:
        return None
    return OwnerRef(names.JOBSET_API, KIND, (pod.get("metadata") or {}).get("namespace") or "default", name)


def pods(jobset: Mapping, shape: WorkloadShape) -> list[dict]:
    name = (jobset.get("metadata") or {}).get("name")
    return [pod for the_role in shape.roles for pod in indexed_pods(
        jobset, the_role, f"{name}-{the_role.name}",
        {names.JOBSET_NAME: name, names.JOBSET_REPLICATED_JOB: the_role.name})]


def in_order(jobset: Mapping) -> bool:
    """Started in order, or with dependsOn: its controller creates later jobs once earlier ones run."""
    spec = jobset.get("spec") or {}
    ordered = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
    return ordered or any(job.get("dependsOn") for job in spec.get("replicatedJobs") or [])


JOBSET = WorkloadKind(
    "jobset", (KIND,), None,
    watch=(WatchedKind("jobset.x-k8s.io", "v1alpha2", "jobsets", KIND, True),),
    roles=roles, owner=owner, owner_rank=10, role_label=names.JOBSET_REPLICATED_JOB, pods=pods,
    all_at_once=lambda jobset: not in_order(jobset), one_after_another=in_order,
)
