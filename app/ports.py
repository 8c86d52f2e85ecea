"""The two seams between the service and a cluster source (the Kubernetes API or the in-memory demo).

ObjectSink: what a source feeds with objects (after a list, and on every watch event).
ClusterWriter: the side effects the service asks of the cluster (bind, annotate, evict, events).
Objects are plain dicts shaped as the API server serves them (apiVersion, kind, metadata, spec, status).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, Protocol


from grouper.kinds import WatchedKind
from grouper.kinds import watched as registered_kinds

__all__ = ["WatchedKind"]     # defined beside the workload kinds that declare what they need watched

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


NATIVE_KINDS: tuple[WatchedKind, ...] = (
    # v1.37: v1beta1 only with GenericWorkload (beta, off by default), else v1alpha3; v1.36: v1alpha2
    WatchedKind("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", True),
    WatchedKind("scheduling.k8s.io", "v1alpha3", "podgroups", "PodGroup", True),
    WatchedKind("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup", True),
    WatchedKind("scheduling.k8s.io", "v1beta1", "workloads", "Workload", True),
    WatchedKind("scheduling.k8s.io", "v1alpha3", "workloads", "Workload", True),
    WatchedKind("scheduling.k8s.io", "v1alpha2", "workloads", "Workload", True),
    WatchedKind("scheduling.k8s.io", "v1beta1", "compositepodgroups", "CompositePodGroup", True),
    WatchedKind("scheduling.k8s.io", "v1alpha3", "compositepodgroups", "CompositePodGroup", True),
)

# Dynamic Resource Allocation (v1 GA in Kubernetes v1.34; the first version served wins, none is watched
# where the API server serves none).
DRA_KINDS: tuple[WatchedKind, ...] = tuple(
    WatchedKind("resource.k8s.io", version, plural, kind, namespaced)
    for plural, kind, namespaced in (("deviceclasses", "DeviceClass", False),
                                     ("resourceslices", "ResourceSlice", False),
                                     ("resourceclaims", "ResourceClaim", True),
                                     ("resourceclaimtemplates", "ResourceClaimTemplate", True))
    for version in ("v1", "v1beta2", "v1beta1"))

# What the service watches besides the workload kinds: the cluster (nodes, pods, topologies) and what
# preemption and priorities read.
CLUSTER_KINDS: tuple[WatchedKind, ...] = (
    WatchedKind("", "v1", "nodes", "Node", False),
    WatchedKind("", "v1", "pods", "Pod", True),
    WatchedKind("kai.scheduler", "v1alpha1", "topologies", "Topology", False),
    WatchedKind("kueue.x-k8s.io", "v1beta2", "topologies", "Topology", False),
    WatchedKind("kueue.x-k8s.io", "v1beta1", "topologies", "Topology", False),
    WatchedKind("topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode", False),
)
POLICY_KINDS: tuple[WatchedKind, ...] = (
    WatchedKind("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False),
    WatchedKind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
)


def _all_kinds() -> tuple[WatchedKind, ...]:
    """The cluster kinds, every registered workload kind's (grouper/kinds/), the policy kinds, then the
    native gangs (Kubernetes v1.36 alpha, v1.37 beta: the first version served wins, none is watched when the
    API server serves none, i.e. the feature gates are off)."""
    return (*CLUSTER_KINDS, *registered_kinds(), *POLICY_KINDS, *NATIVE_KINDS, *DRA_KINDS)


# Everything the service watches (plus Settings.extra_kinds), as registered at start. Kinds whose CRD is not
# installed are skipped by the source.
WATCHED_KINDS: tuple[WatchedKind, ...] = _all_kinds()


def watched_kinds(extra: Iterable[WatchedKind] = ()) -> tuple[WatchedKind, ...]:
    """Every kind watched (kinds registered since start included), then the extra kinds not among them."""
    known_kinds = _all_kinds()
    known = {(k.group, k.version, k.plural) for k in known_kinds}
    added = [k for k in dict.fromkeys(extra) if (k.group, k.version, k.plural) not in known]
    return known_kinds + tuple(added)


def watches(kinds: Iterable[WatchedKind], api_group: str, kind: str) -> bool:
    """Whether an object of this API group and Kind is among `kinds` (any version)."""
    return any(k.group == api_group and k.kind == kind for k in kinds)


class ObjectSink(Protocol):
    def replace(self, kind: WatchedKind, objects: Sequence[Mapping]) -> None:
        """The full current set of one kind (after a list or a relist)."""

    def apply(self, kind: WatchedKind, event: EventType, obj: Mapping) -> None:
        """One watch event."""

    def synced(self) -> None:
        """Every kind has been listed once: the service may report ready."""


def gate_index(pod: Mapping, gate: str, scheduler_names: Sequence[str]) -> int | None:
    """Where `gate` sits in the pod's spec.schedulingGates, for a pod of one of `scheduler_names` that is not
    bound or being deleted; None otherwise (nothing a writer may remove)."""
    spec = pod.get("spec") or {}
    if spec.get("schedulerName") not in scheduler_names or spec.get("nodeName") \
            or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    names = [entry.get("name") for entry in spec.get("schedulingGates") or ()]
    return names.index(gate) if gate in names else None


class BindConflict(Exception):
    """The pod is already bound (HTTP 409), to the node named in `node` when known."""

    def __init__(self, message: str, node: str | None = None):
        super().__init__(message)
        self.node = node


class EvictionRefused(Exception):
    """The Eviction API refused (HTTP 429: a PodDisruptionBudget would be violated)."""


class ClusterWriter(Protocol):
    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        """Create the Binding (UID precondition); the API server copies the Binding's annotations onto the
        pod in the same write. Raises BindConflict on 409."""

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Merge-patch annotations onto a pod."""

    def ungate_pod(self, namespace: str, name: str, gate: str, scheduler_names: Sequence[str]) -> bool:
        """Remove scheduling gate `gate` from the pod, decided from the API server's copy: only a pod of one of
        `scheduler_names` that still carries the gate. False when there was nothing to remove (or no pod)."""

    def evict(self, namespace: str, name: str, uid: str | None = None) -> None:
        """Evict through the Eviction API. Raises EvictionRefused on 429."""

    def event(self, involved: Mapping, reason: str, message: str, type_: str = "Normal") -> None:
        """Record a core/v1 Event on an object (best effort)."""

    def create_podgroup(self, namespace: str, body: Mapping) -> None:
        """Create a native scheduling.k8s.io PodGroup (app.kube.native_gate); one that exists is fine."""
