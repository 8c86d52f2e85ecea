"""Reading and making pods, for the kinds' identity and expansion rules: a pod's labels, its controller,
an index label's value; a pod as a controller creates it."""
from __future__ import annotations

import copy
from collections.abc import Collection, Mapping

from ..errors import GroupingError
from .base import OwnerRef, RoleTemplate
from .fields import parse_int


def labels_of(pod: Mapping) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def pod_annotations(pod: Mapping) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def pod_error(pod: Mapping, message: str) -> GroupingError:
    metadata = pod.get("metadata") or {}
    name = metadata.get("name") or metadata.get("generateName") or "<unnamed>"
    return GroupingError(f"Pod {metadata.get('namespace') or 'default'}/{name}: {message}")


def int_label(pod: Mapping, key: str, value) -> int:
    number = parse_int(value)
    if number is None or number < 0:
        raise pod_error(pod, f"label {key}={value!r} is invalid; expected a non-negative integer")
    return number


def index_of(pod: Mapping, role: RoleTemplate) -> int | None:
    """The pod's index from its role's index label (a label, else an annotation); None for pods that are
    not numbered (interchangeable)."""
    if role.index_label is None:
        return role.index_offset if role.replicas == 1 else None
    value = labels_of(pod).get(role.index_label, pod_annotations(pod).get(role.index_label))
    if value is None:
        if role.replicas == 1:
            return role.index_offset
        raise pod_error(pod, f"label {role.index_label} (the index label of {role.field}) is missing")
    return int_label(pod, role.index_label, value)


def controller_of(pod: Mapping) -> Mapping | None:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return next((ref for ref in refs if ref.get("controller")), None)


def controller_owner(pod: Mapping, kinds: Collection[str] | None = None) -> OwnerRef | None:
    """The pod's controller (of one of `kinds`, when given) as its owner."""
    controller = controller_of(pod)
    if controller is None or (kinds is not None and controller.get("kind") not in kinds):
        return None
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    return OwnerRef(controller.get("apiVersion", ""), controller.get("kind", ""), namespace,
                    controller.get("name", ""), uid=controller.get("uid"))


def controlled_by(*kinds: str):
    """WorkloadKind.owner for a kind whose pods are found by their controller reference (the registry merges
    neighbours of this sort into one look at the pod's controller)."""
    names = frozenset(kinds)

    def owner(pod: Mapping) -> OwnerRef | None:
        return controller_owner(pod, names)
    owner.controller_kinds = names
    return owner


def owner_reference(obj: Mapping, api_version: str | None = None, kind: str | None = None,
                    name: str | None = None) -> dict:
    metadata = obj.get("metadata") or {}
    return {"apiVersion": api_version or obj.get("apiVersion"), "kind": kind or obj.get("kind"),
            "name": name or metadata.get("name"), "uid": metadata.get("uid") or "",
            "controller": True, "blockOwnerDeletion": True}


def make_pod(workload: Mapping, role: RoleTemplate, name: str, labels: Mapping, annotations: Mapping,
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


def indexed_pods(workload: Mapping, role: RoleTemplate, prefix: str, extra: Mapping) -> list[dict]:
    """One pod per index, `<prefix>-<index>`, carrying its index in the role's index label."""
    pods = []
    for index in role.indexes():
        labels = dict(extra)
        if role.index_label:
            labels[role.index_label] = str(index)
        pods.append(make_pod(workload, role, f"{prefix}-{index}", labels, {}, owner_reference(workload)))
    return pods
