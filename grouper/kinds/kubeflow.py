"""Kubeflow jobs (training operator: PyTorchJob, TFJob, JAXJob, XGBoostJob, PaddleJob; mpi-operator: MPIJob):
one role per replica type, pods numbered in replica-index."""
from __future__ import annotations

from collections.abc import Mapping

from .. import names
from ..errors import GroupingError, describe
from .base import RoleTemplate, WatchedKind, WorkloadKind, WorkloadShape
from .fields import count_field, mapping_field, role
from .pods import controlled_by, make_pod, owner_reference

GROUP = "kubeflow.org"
# Kind -> the spec field holding its replica specs
SPECS = {
    "PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs", "JAXJob": "jaxReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs", "MPIJob": "mpiReplicaSpecs", "PaddleJob": "paddleReplicaSpecs",
}
WATCHED = (("v1", "PyTorchJob"), ("v1", "TFJob"), ("v1", "JAXJob"), ("v1", "XGBoostJob"), ("v2beta1", "MPIJob"))
OPERATORS = {"MPIJob": "mpijob-controller"}          # else <kind>-controller
# the training operator creates every replica at once; mpi-operator may wait for the workers (see below)
ALL_AT_ONCE = ("PyTorchJob", "TFJob", "JAXJob", "XGBoostJob")


def roles(job: Mapping) -> list[RoleTemplate]:
    field = SPECS[job["kind"]]
    replica_specs = (job.get("spec") or {}).get(field)
    if not isinstance(replica_specs, Mapping) or not replica_specs:
        raise GroupingError(f"{describe(job)}: spec.{field} is missing or empty; "
                            f"expected a map of replica type (e.g. Worker) to replica spec")
    made = []
    for replica_type, replica_spec in replica_specs.items():
        path = f"spec.{field}.{replica_type}"
        replica_spec = mapping_field(job, path, replica_spec)
        replicas = count_field(job, f"{path}.replicas", replica_spec.get("replicas"), 1)
        template = mapping_field(job, f"{path}.template", replica_spec.get("template"))
        made.append(role(job, str(replica_type).lower(), path, f"{path}.template", replicas, template,
                         names.KF_REPLICA_INDEX))
    return made


def pods(job: Mapping, shape: WorkloadShape) -> list[dict]:
    name = (job.get("metadata") or {}).get("name")
    operator = OPERATORS.get(job["kind"], f"{job['kind'].lower()}-controller")
    made = []
    for the_role in shape.roles:
        for index in the_role.indexes():
            labels = {names.KF_JOB_NAME: name, names.KF_OPERATOR: operator,
                      names.KF_REPLICA_TYPE: the_role.name, names.KF_REPLICA_INDEX: str(index)}
            if the_role.index_label:
                labels[the_role.index_label] = str(index)
            if the_role.name in ("master", "chief", "launcher") and index == 0:
                labels[names.KF_JOB_ROLE] = "master"
            made.append(make_pod(job, the_role, f"{name}-{the_role.name}-{index}", labels, {},
                                 owner_reference(job)))
    return made


def elastic_workers(job: Mapping) -> int | None:
    """A PyTorchJob's elasticPolicy.minReplicas: the workers it may start with."""
    if job.get("kind") != "PyTorchJob":
        return None
    policy = mapping_field(job, "spec.elasticPolicy", (job.get("spec") or {}).get("elasticPolicy"))
    value = policy.get("minReplicas")
    return None if value is None else count_field(job, "spec.elasticPolicy.minReplicas", value, 0)


def one_after_another(job: Mapping) -> bool:
    """An MPIJob whose launcher waits for its workers to be ready."""
    spec = job.get("spec") or {}
    return job.get("kind") == "MPIJob" and spec.get("launcherCreationPolicy") == "WaitForWorkersReady"


KUBEFLOW = WorkloadKind(
    "kubeflow", tuple(SPECS), GROUP, owner_rank=20,
    watch=tuple(WatchedKind(GROUP, version, kind.lower() + "s", kind, True) for version, kind in WATCHED),
    roles=roles, owner=controlled_by(*SPECS), role_label=names.KF_REPLICA_TYPE, pods=pods,
    all_at_once=lambda job: job.get("kind") in ALL_AT_ONCE, one_after_another=one_after_another,
    elastic_workers=elastic_workers, numbers_pods=", ".join(kind for _, kind in WATCHED),
)

