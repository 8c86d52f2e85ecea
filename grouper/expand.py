"""The pods a workload's controller would create, with the labels, annotations, names and owner
references it sets. The offline simulator and the webhook tests feed these to the grouper."""
from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping

from . import names
from .errors import GroupingError, describe
from .kinds import RoleTemplate, workload_shape

KUBEFLOW_OPERATORS = {"MPIJob": "mpijob-controller"}


def _owner_reference(obj: Mapping, api_version: str | None = None, kind: str | None = None,
                     name: str | None = None) -> dict:
    metadata = obj.get("metadata") or {}
    return {"apiVersion": api_version or obj.get("apiVersion"), "kind": kind or obj.get("kind"),
            "name": name or metadata.get("name"), "uid": metadata.get("uid") or "",
            "controller": True, "blockOwnerDeletion": True}


def _pod(workload: Mapping, role: RoleTemplate, name: str, labels: Mapping, annotations: Mapping,
         owner: dict) -> dict:
    template_meta = role.template.get("metadata") or {}
    metadata = {
        "name": name,
        "namespace": (workload.get("metadata") or {}).get("namespace") or "default",
        "labels": {**(template_meta.get("labels") or {}), **labels},
        "annotations": {**(template_meta.get("annotations") or {}), **annotations},
        "ownerReferences": [owner],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": copy.deepcopy(dict(role.spec))}


def _job_pods(job: Mapping, role: RoleTemplate) -> list[dict]:
    metadata = job.get("metadata") or {}
    name, uid = metadata.get("name"), metadata.get("uid") or ""
    pods = []
    for index in role.indexes():
        labels = {names.JOB_NAME: name, "job-name": name, names.JOB_CONTROLLER_UID: uid, "controller-uid": uid}
        annotations = {}
        if role.index_label == names.JOB_INDEX:
            labels[names.JOB_INDEX] = annotations[names.JOB_INDEX] = str(index)
        elif role.index_label:
            labels[role.index_label] = str(index)
        pods.append(_pod(job, role, f"{name}-{index}", labels, annotations, _owner_reference(job)))
    return pods


def _kubeflow_pods(job: Mapping, role: RoleTemplate) -> list[dict]:
    name = (job.get("metadata") or {}).get("name")
    operator = KUBEFLOW_OPERATORS.get(job["kind"], f"{job['kind'].lower()}-controller")
    pods = []
    for index in role.indexes():
        labels = {names.KF_JOB_NAME: name, names.KF_OPERATOR: operator,
                  names.KF_REPLICA_TYPE: role.name, names.KF_REPLICA_INDEX: str(index)}
        if role.index_label:
            labels[role.index_label] = str(index)
        if role.name in ("master", "chief", "launcher") and index == 0:
            labels[names.KF_JOB_ROLE] = "master"
        pods.append(_pod(job, role, f"{name}-{role.name}-{index}", labels, {}, _owner_reference(job)))
    return pods


def _lws_pods(lws: Mapping, roles: list[RoleTemplate], groups: int) -> list[dict]:
    metadata = lws.get("metadata") or {}
    name = metadata.get("name")
    size = sum(role.replicas for role in roles)
    pods = []
    for group in range(groups):
        leader = f"{name}-{group}"
        group_key = hashlib.sha1(f"{metadata.get('namespace')}/{leader}".encode()).hexdigest()
        for role in roles:
            for index in role.indexes():
                labels = {names.LWS_NAME: name, names.LWS_GROUP_INDEX: str(group), names.LWS_GROUP_KEY: group_key,
                          names.LWS_WORKER_INDEX: str(index)}
                if role.index_label and role.index_label != names.LWS_WORKER_INDEX:
                    labels[role.index_label] = str(index)
                annotations = {names.LWS_SIZE: str(size)}
                if role.name == "leader":
                    owner = _owner_reference(lws, "apps/v1", "StatefulSet", name)
                    pod_name = leader
                else:
                    annotations[names.LWS_LEADER_NAME] = leader
                    owner = _owner_reference(lws, "apps/v1", "StatefulSet", leader)
                    pod_name = f"{leader}-{index}"
                pods.append(_pod(lws, role, pod_name, labels, annotations, owner))
    return pods


def _indexed_pods(workload: Mapping, role: RoleTemplate, prefix: str, extra: Mapping) -> list[dict]:
    pods = []
    for index in role.indexes():
        labels = dict(extra)
        if role.index_label:
            labels[role.index_label] = str(index)
        pods.append(_pod(workload, role, f"{prefix}-{index}", labels, {}, _owner_reference(workload)))
    return pods


def expand_pods(workload: Mapping) -> list[dict]:
    """Full Pod objects as the workload's controller would create them, in role then index order."""
    shape = workload_shape(workload)
    if not shape.roles:
        raise GroupingError(f"{describe(workload)}: no pod template found; expected spec.template, "
                            f"spec.replicatedJobs or a supported kind (Job, kubeflow jobs, LeaderWorkerSet)")
    name = (workload.get("metadata") or {}).get("name")
    if shape.family == "job":
        return _job_pods(workload, shape.roles[0])
    if shape.family == "kubeflow":
        return [pod for role in shape.roles for pod in _kubeflow_pods(workload, role)]
    if shape.family == "lws":
        return _lws_pods(workload, shape.roles, shape.groups)
    if shape.family == "jobset":
        return [pod for role in shape.roles for pod in _indexed_pods(
            workload, role, f"{name}-{role.name}", {names.JOBSET_NAME: name, names.JOBSET_REPLICATED_JOB: role.name})]
    return _indexed_pods(workload, shape.roles[0], name, {})
