"""Which workload or PodGroup a pod belongs to, from its labels, annotations and owner references."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import names
from .kinds import KUBEFLOW_SPECS, parse_int
from .names import JOBSET_API, LWS_API


@dataclass(frozen=True)
class OwnerRef:
    api_version: str
    kind: str
    namespace: str
    name: str
    group_index: int | None = None      # LeaderWorkerSet group (replica) of the pod
    uid: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _controller(metadata: Mapping) -> Mapping | None:
    refs = metadata.get("ownerReferences") or []
    return next((ref for ref in refs if ref.get("controller")), None)


def owner_of(pod: Mapping) -> OwnerRef | None:
    """The workload (Job, kubeflow job, LeaderWorkerSet, JobSet, other controller) or the PodGroup
    a pod belongs to; None for a bare pod outside any PodGroup."""
    metadata = pod.get("metadata") or {}
    namespace = metadata.get("namespace") or "default"
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    if labels.get(names.LWS_NAME):
        return OwnerRef(LWS_API, "LeaderWorkerSet", namespace, labels[names.LWS_NAME],
                        parse_int(labels.get(names.LWS_GROUP_INDEX)))
    if labels.get(names.JOBSET_NAME):
        return OwnerRef(JOBSET_API, "JobSet", namespace, labels[names.JOBSET_NAME])
    controller = _controller(metadata)
    if controller and (controller.get("kind") == "Job" or controller.get("kind") in KUBEFLOW_SPECS):
        return OwnerRef(controller.get("apiVersion", ""), controller["kind"], namespace,
                        controller.get("name", ""), uid=controller.get("uid"))
    podgroup = annotations.get(names.KAI_PODGROUP_ANNOTATION)
    if podgroup and not (controller and _derived_from(podgroup, controller)):
        return OwnerRef(names.KAI_PODGROUP_API, "PodGroup", namespace, podgroup)
    if labels.get(names.SP_PODGROUP_LABEL):
        return OwnerRef(names.SP_PODGROUP_API, "PodGroup", namespace, labels[names.SP_PODGROUP_LABEL])
    if controller:
        return OwnerRef(controller.get("apiVersion", ""), controller.get("kind", ""), namespace,
                        controller.get("name", ""), uid=controller.get("uid"))
    return None


def _derived_from(podgroup: str, controller: Mapping) -> bool:
    """A pod-group-name that the podgrouper (or our webhook) derived from the controller's name,
    rather than a PodGroup written by hand."""
    return podgroup.startswith(f"pg-{controller.get('name', '')}")
