"""PodGroups that pods join by name: KAI's (annotation pod-group-name) and scheduler-plugins' (label
scheduling.x-k8s.io/pod-group). Their gangs come from the PodGroup and its pods (grouper/podgroups.py), not
from pod templates. Native scheduling.k8s.io PodGroups are app/ports.py NATIVE_KINDS and grouper/native.py."""
from __future__ import annotations

from collections.abc import Mapping

from .. import names
from .base import OwnerRef, WatchedKind, WorkloadKind
from .pods import controller_of, labels_of, pod_annotations


def _derived_from(podgroup: str, controller: Mapping) -> bool:
    """A pod-group-name that the podgrouper (or our webhook) derived from the controller's name,
    rather than a PodGroup written by hand."""
    return podgroup.startswith(f"pg-{controller.get('name', '')}")


def kai_owner(pod: Mapping) -> OwnerRef | None:
    podgroup = pod_annotations(pod).get(names.KAI_PODGROUP_ANNOTATION)
    controller = controller_of(pod)
    if not podgroup or (controller and _derived_from(podgroup, controller)):
        return None
    return OwnerRef(names.KAI_PODGROUP_API, "PodGroup", (pod.get("metadata") or {}).get("namespace") or "default",
                    podgroup)


def scheduler_plugins_owner(pod: Mapping) -> OwnerRef | None:
    podgroup = labels_of(pod).get(names.SP_PODGROUP_LABEL)
    if not podgroup:
        return None
    return OwnerRef(names.SP_PODGROUP_API, "PodGroup", (pod.get("metadata") or {}).get("namespace") or "default",
                    podgroup)


KAI_PODGROUP = WorkloadKind(
    "kai-podgroup", ("PodGroup",), "scheduling.run.ai", owner_rank=40,
    watch=(WatchedKind("scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup", True),), owner=kai_owner,
)
SCHEDULER_PLUGINS_PODGROUP = WorkloadKind(
    "podgroup", ("PodGroup",), "scheduling.x-k8s.io", owner_rank=40,
    watch=(WatchedKind("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True),),
    owner=scheduler_plugins_owner,
)
