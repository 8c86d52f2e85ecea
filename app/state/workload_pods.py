"""How many live pods each workload has (Job, JobSet, kubeflow job, LeaderWorkerSet group, StatefulSet):
a gang planned from its workload waits until the pods its controller creates in batches all exist."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from grouper import owner_of

from ..ports import EventType

TERMINAL = ("Succeeded", "Failed")


def workload_key(pod: Mapping) -> tuple | None:
    owner = owner_of(pod)
    if owner is None or owner.kind == "PodGroup":
        return None
    return owner.kind, owner.namespace, owner.name, owner.group_index


class WorkloadPods:
    def __init__(self) -> None:
        self._pods: dict[tuple, set[str]] = {}

    def count(self, pod: Mapping) -> int:
        """Live pods of the workload `pod` belongs to (0 for a pod of no workload)."""
        key = workload_key(pod)
        return len(self._pods.get(key, ())) if key is not None else 0

    def apply(self, event: EventType, pod: Mapping) -> None:
        key = workload_key(pod)
        if key is None:
            return
        name = (pod.get("metadata") or {}).get("name") or ""
        live = event != "DELETED" and (pod.get("status") or {}).get("phase") not in TERMINAL
        members = self._pods.setdefault(key, set())
        if live:
            members.add(name)
            return
        members.discard(name)
        if not members:
            del self._pods[key]

    def replace(self, pods: Iterable[Mapping]) -> None:
        self._pods.clear()
        for pod in pods:
            self.apply("ADDED", pod)
