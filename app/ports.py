"""The two seams between the service and a cluster source (the Kubernetes API or the in-memory demo).

ObjectSink: what a source feeds with objects (after a list, and on every watch event).
ClusterWriter: the side effects the service asks of the cluster (bind, annotate, evict, events).
Objects are plain dicts shaped as the API server serves them (apiVersion, kind, metadata, spec, status).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True)
class WatchedKind:
    group: str            # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


NATIVE_KINDS: tuple[WatchedKind, ...] = (
    WatchedKind("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", True),
    WatchedKind("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup", True),
    WatchedKind("scheduling.k8s.io", "v1beta1", "workloads", "Workload", True),
    WatchedKind("scheduling.k8s.io", "v1alpha2", "workloads", "Workload", True),
    WatchedKind("scheduling.k8s.io", "v1beta1", "compositepodgroups", "CompositePodGroup", True),
    WatchedKind("scheduling.k8s.io", "v1alpha3", "compositepodgroups", "CompositePodGroup", True),
)

# Everything the service watches (plus Settings.extra_kinds). Kinds whose CRD is not installed are skipped
# by the source.
WATCHED_KINDS: tuple[WatchedKind, ...] = (
    WatchedKind("", "v1", "nodes", "Node", False),
    WatchedKind("", "v1", "pods", "Pod", True),
    WatchedKind("kai.scheduler", "v1alpha1", "topologies", "Topology", False),
    WatchedKind("kueue.x-k8s.io", "v1beta2", "topologies", "Topology", False),
    WatchedKind("kueue.x-k8s.io", "v1beta1", "topologies", "Topology", False),
    WatchedKind("topology.volcano.sh", "v1alpha1", "hypernodes", "HyperNode", False),
    WatchedKind("batch", "v1", "jobs", "Job", True),
    WatchedKind("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", True),
    WatchedKind("kubeflow.org", "v1", "tfjobs", "TFJob", True),
    WatchedKind("kubeflow.org", "v1", "jaxjobs", "JAXJob", True),
    WatchedKind("kubeflow.org", "v1", "xgboostjobs", "XGBoostJob", True),
    WatchedKind("kubeflow.org", "v2beta1", "mpijobs", "MPIJob", True),
    WatchedKind("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", True),
    WatchedKind("apps", "v1", "statefulsets", "StatefulSet", True),
    WatchedKind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", True),
    WatchedKind("scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup", True),
    WatchedKind("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", True),
    WatchedKind("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False),
    WatchedKind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
    # native gangs (Kubernetes v1.36 alpha, v1.37 beta): the first version served wins, none is watched when
    # the API server serves none (the feature gates are off)
    *NATIVE_KINDS,
)


def watched_kinds(extra: Iterable[WatchedKind] = ()) -> tuple[WatchedKind, ...]:
    """WATCHED_KINDS followed by the extra kinds that are not among them already."""
    known = {(k.group, k.version, k.plural) for k in WATCHED_KINDS}
    added = [k for k in dict.fromkeys(extra) if (k.group, k.version, k.plural) not in known]
    return WATCHED_KINDS + tuple(added)


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

    def evict(self, namespace: str, name: str, uid: str | None = None) -> None:
        """Evict through the Eviction API. Raises EvictionRefused on 429."""

    def event(self, involved: Mapping, reason: str, message: str, type_: str = "Normal") -> None:
        """Record a core/v1 Event on an object (best effort)."""

    def create_podgroup(self, namespace: str, body: Mapping) -> None:
        """Create a native scheduling.k8s.io PodGroup (app.kube.native_gate); one that exists is fine."""
