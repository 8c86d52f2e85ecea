"""What each workload kind looks like to the grouper: its roles (pod templates), how many pods each
role has, and which pod label carries a pod's index."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from topology.resources import pod_requests

from . import names
from .errors import GroupingError, describe, invalid

# kind -> the spec field holding the replica specs (kubeflow training operator and mpi-operator)
KUBEFLOW_SPECS = {
    "PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs", "JAXJob": "jaxReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs", "MPIJob": "mpiReplicaSpecs", "PaddleJob": "paddleReplicaSpecs",
}
LWS_KIND = "LeaderWorkerSet"
JOBSET_KIND = "JobSet"


@dataclass
class RoleTemplate:
    """One pod template of a workload and the pods made from it."""

    name: str                    # role name: "job", replica type lowercased, "leader" / "worker", ...
    field: str                   # where the role sits, for messages ("spec.tfReplicaSpecs.Worker")
    template_field: str          # where its pod template sits ("spec.tfReplicaSpecs.Worker.template")
    replicas: int
    template: Mapping
    index_label: str | None      # pod label holding the index (None: the pods are not indexed)
    index_offset: int = 0        # value of the first index (LWS workers start after the leader)

    @property
    def annotations(self) -> Mapping[str, str]:
        return (self.template.get("metadata") or {}).get("annotations") or {}

    @property
    def labels(self) -> Mapping[str, str]:
        return (self.template.get("metadata") or {}).get("labels") or {}

    @property
    def spec(self) -> Mapping:
        return self.template.get("spec") or {}

    def indexes(self) -> range:
        return range(self.index_offset, self.index_offset + self.replicas)


@dataclass
class WorkloadShape:
    family: str                  # job | kubeflow | lws | jobset | generic
    roles: list[RoleTemplate]
    groups: int = 1              # LeaderWorkerSet replicas: each group is its own gang

    def role(self, name: str) -> RoleTemplate | None:
        return next((role for role in self.roles if role.name == name), None)


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


def _role(owner: Mapping, name: str, field: str, template_field: str, replicas: int, template: Mapping,
          default_index_label: str | None, index_offset: int = 0) -> RoleTemplate:
    """A role whose pods carry their index in the template's pod-index-label, else the default."""
    return RoleTemplate(name, field, template_field, replicas, template,
                        _index_label(owner, template, default_index_label, template_field), index_offset)


def _index_label(obj: Mapping, template: Mapping, default: str | None, path: str) -> str | None:
    """The pod-index-label annotation (pod template first, then the workload root), else the default."""
    _check_fields(obj, f"{path}.", template, ("metadata", "spec"))
    metadata = template.get("metadata") or {}
    _check_fields(obj, f"{path}.metadata.", metadata, ("labels", "annotations"))
    template_annotations = metadata.get("annotations") or {}
    label = template_annotations.get(names.POD_INDEX_LABEL) or annotations_of(obj).get(names.POD_INDEX_LABEL)
    return label or default


def _job_roles(job: Mapping) -> list[RoleTemplate]:
    spec = job.get("spec") or {}
    parallelism = count_field(job, "spec.parallelism", spec.get("parallelism"), 1)
    completions = spec.get("completions")
    if completions is not None:
        parallelism = min(parallelism, count_field(job, "spec.completions", completions, 1))
    template = mapping_field(job, "spec.template", spec.get("template"))
    default_label = names.JOB_INDEX if spec.get("completionMode") == "Indexed" else None
    return [_role(job, "job", "spec.template", "spec.template", parallelism, template, default_label)]


def _kubeflow_roles(job: Mapping) -> list[RoleTemplate]:
    field = KUBEFLOW_SPECS[job["kind"]]
    replica_specs = (job.get("spec") or {}).get(field)
    if not isinstance(replica_specs, Mapping) or not replica_specs:
        raise GroupingError(f"{describe(job)}: spec.{field} is missing or empty; "
                            f"expected a map of replica type (e.g. Worker) to replica spec")
    roles = []
    for replica_type, replica_spec in replica_specs.items():
        path = f"spec.{field}.{replica_type}"
        replica_spec = mapping_field(job, path, replica_spec)
        replicas = count_field(job, f"{path}.replicas", replica_spec.get("replicas"), 1)
        template = mapping_field(job, f"{path}.template", replica_spec.get("template"))
        roles.append(_role(job, str(replica_type).lower(), path, f"{path}.template", replicas, template,
                           names.KF_REPLICA_INDEX))
    return roles


def _lws_roles(lws: Mapping) -> list[RoleTemplate]:
    template = mapping_field(lws, "spec.leaderWorkerTemplate", (lws.get("spec") or {}).get("leaderWorkerTemplate"))
    size = count_field(lws, "spec.leaderWorkerTemplate.size", template.get("size"), 1, minimum=1)
    worker = mapping_field(lws, "spec.leaderWorkerTemplate.workerTemplate", template.get("workerTemplate"))
    leader = mapping_field(lws, "spec.leaderWorkerTemplate.leaderTemplate", template.get("leaderTemplate")) or worker
    leader_field = "spec.leaderWorkerTemplate." + ("leaderTemplate" if template.get("leaderTemplate")
                                                   else "workerTemplate")
    roles = [RoleTemplate("leader", leader_field, leader_field, 1, leader, names.LWS_WORKER_INDEX, 0)]
    if size > 1:
        path = "spec.leaderWorkerTemplate.workerTemplate"
        roles.append(_role(lws, "worker", path, path, size - 1, worker, names.LWS_WORKER_INDEX, 1))
    return roles


def _jobset_roles(jobset: Mapping) -> list[RoleTemplate]:
    roles = []
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
        roles.append(_role(jobset, name, template_field, template_field, replicas * parallelism, template, None))
    return roles


def _generic_roles(obj: Mapping) -> list[RoleTemplate]:
    spec = obj.get("spec") or {}
    template = spec.get("template")
    if not isinstance(template, Mapping):
        return []
    replicas_field = "spec.replicas" if "replicas" in spec else "spec.parallelism"
    replicas = count_field(obj, replicas_field, spec.get("replicas", spec.get("parallelism")), 1)
    return [_role(obj, str(obj.get("kind") or "pod").lower(), "spec.template", "spec.template", replicas, template,
                  None)]


def family_of(workload: Mapping) -> str:
    kind = workload.get("kind")
    api_version = str(workload.get("apiVersion") or "")
    if kind == "Job" and api_version.startswith("batch/"):
        return "job"
    if kind in KUBEFLOW_SPECS and "kubeflow.org" in api_version:
        return "kubeflow"
    if kind == LWS_KIND:
        return "lws"
    if kind == JOBSET_KIND:
        return "jobset"
    return "generic"


def suspended(workload: Mapping) -> bool:
    """A suspended workload (a Job, JobSet or RayJob `spec.suspend`, a kubeflow job or MPIJob
    `spec.runPolicy.suspend`) has its pods deleted and makes no replacements until it is resumed; Kueue
    preempts and requeues workloads this way."""
    spec = workload.get("spec")
    if not isinstance(spec, Mapping):
        return False
    run_policy = spec.get("runPolicy")
    return spec.get("suspend") is True or (isinstance(run_policy, Mapping) and run_policy.get("suspend") is True)


def workload_shape(workload: Mapping) -> WorkloadShape:
    _check_fields(workload, "", workload, ("metadata", "spec"))
    _check_fields(workload, "metadata.", workload.get("metadata") or {}, ("labels", "annotations"))
    shape = _shape(workload, family_of(workload))
    pods = shape.groups * sum(role.replicas for role in shape.roles)
    if pods > MAX_PODS:
        counts = ", ".join(f"{role.field}: {role.replicas}" for role in shape.roles)
        groups = f" x {shape.groups} groups" if shape.groups > 1 else ""
        raise GroupingError(f"{describe(workload)}: {pods} pods ({counts}{groups}) is more than one workload can "
                            f"have here; expected at most {MAX_PODS}")
    return shape


def check_requests(workload: Mapping, shape: WorkloadShape) -> None:
    """Each role's pod template has requests the planner can read; a GroupingError naming the field
    otherwise (the API server validates pod templates of built-in kinds, not of every custom resource)."""
    for role in shape.roles:
        spec = mapping_field(workload, f"{role.template_field}.spec", role.template.get("spec"))
        try:
            pod_requests(spec)
        except ValueError as err:           # RequestError, QuantityError: the message names the field
            raise GroupingError(f"{describe(workload)}: {role.template_field}.{err}") from None


def _check_fields(owner: Mapping, path: str, container: Mapping, fields: tuple[str, ...]) -> None:
    """Each of the container's `fields` is a mapping or unset; a GroupingError naming `path`+field otherwise."""
    for field_name in fields:
        mapping_field(owner, path + field_name, container.get(field_name))


def _shape(workload: Mapping, family: str) -> WorkloadShape:
    if family == "job":
        return WorkloadShape(family, _job_roles(workload))
    if family == "kubeflow":
        return WorkloadShape(family, _kubeflow_roles(workload))
    if family == "lws":
        groups = count_field(workload, "spec.replicas", (workload.get("spec") or {}).get("replicas"), 1)
        return WorkloadShape(family, _lws_roles(workload), groups)
    if family == "jobset":
        return WorkloadShape(family, _jobset_roles(workload))
    return WorkloadShape(family, _generic_roles(workload))
