"""The one interface every workload kind implements (WorkloadKind), and the types it speaks in."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class WatchedKind:
    """An API resource the service lists and watches (app/ports.py re-exports it)."""

    group: str            # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass(frozen=True)
class OwnerRef:
    """The workload or PodGroup a pod belongs to."""

    api_version: str
    kind: str
    namespace: str
    name: str
    group_index: int | None = None      # LeaderWorkerSet group (replica) of the pod
    uid: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


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
    kind: WorkloadKind
    roles: list[RoleTemplate]
    groups: int = 1              # gangs of the workload (LeaderWorkerSet replicas: each group is its own gang)

    @property
    def family(self) -> str:     # job | kubeflow | lws | jobset | statefulset | generic | ...
        return self.kind.name

    def role(self, name: str) -> RoleTemplate | None:
        return next((role for role in self.roles if role.name == name), None)


@dataclass(frozen=True)
class SegmentRule:
    """What a kind's own spec says of one role's segments, beside the segment annotations every kind reads
    (LeaderWorkerSet subgroups). The default says nothing."""

    segmented: bool = True          # False: never split the role (its template's annotations describe another)
    size: int | None = None         # pods per segment its spec sets; None: the segment annotations decide
    size_field: str = ""            # the field that sets the size, named in messages
    exclusive: str | None = None    # the workload annotation naming a level each segment holds exclusively
    # with `size` only: places of segment 0 held by another role's pods, and that role (its pods join
    # segment 0 instead of making a group of their own)
    shift: int = 0
    joined_by: str | None = None


NO_RULE = SegmentRule()


def annotations_only(workload: Mapping, role: RoleTemplate) -> SegmentRule:
    return NO_RULE


def never(workload: Mapping) -> bool:
    return False


def unknown(workload: Mapping) -> None:
    return None


def no_roles(workload: Mapping) -> list[RoleTemplate]:
    return []


@dataclass(frozen=True)
class WorkloadKind:
    """Everything the service, the grouper, the webhook and the offline tools know of one workload kind.
    Each file of grouper/kinds/ builds one, and grouper/kinds/registry.py finds it there
    (docs/architecture.md, "A new workload kind")."""

    name: str                                   # WorkloadShape.family: "job", "lws", ...
    kinds: tuple[str, ...]                      # the Kind names it covers
    group: str | None                           # their API group (None: any group)
    # the API resources the service lists and watches; the ClusterRole grants get, list, watch on each
    # (tests/test_manifests.py checks that); () for a kind grouped only offline or through --extra-kinds
    watch: tuple[WatchedKind, ...] = ()
    # its pod templates and their replicas (RoleTemplate.index_label: the pod label holding each pod's index)
    roles: Callable[[Mapping], list[RoleTemplate]] = no_roles
    # one gang per replica (LeaderWorkerSet groups): how many; None: the workload is one gang
    gangs: Callable[[Mapping], int] | None = None
    # the workload (or PodGroup) a pod names by its labels, annotations or controller; None: not one of
    # ours. Unset: the pod's controller reference finds it (grouper/owners.py)
    owner: Callable[[Mapping], OwnerRef | None] | None = None
    # its place when a pod looks for its owner, lower first (a JobSet's pods are its Jobs' pods too, so JobSet
    # goes before Job; PodGroups that a controller's pods join by hand after those controllers' kinds)
    owner_rank: int = 50
    role_label: str | None = None               # the pod label naming the pod's role (its replica type)
    # how a pod's role, index and gang (of `gangs`) are read when labels alone do not say (grouper/identity.py)
    pod_role: Callable[[Mapping, WorkloadShape], RoleTemplate] | None = None
    pod_index: Callable[[Mapping, RoleTemplate], int | None] | None = None
    pod_gang: Callable[[Mapping, Mapping, int], int] | None = None
    # the pods its controller creates, as the API server admits them (offline tools, tests); None: one pod
    # per index, named <workload>-<index>
    pods: Callable[[Mapping, WorkloadShape], list[dict]] | None = None
    # minimums (grouper/minimum.py): its controller creates every pod of a gang at once (the gang waits for
    # all of them), or only once earlier ones run (the gang is planned at its first pod and is not stale
    # while the rest come); how many pods it will still create (None: unknown)
    all_at_once: Callable[[Mapping], bool] = never
    one_after_another: Callable[[Mapping], bool] = never
    still_to_run: Callable[[Mapping], int | None] = unknown
    elastic_workers: Callable[[Mapping], int | None] = unknown   # the workers its spec lets it start with
    # segments and exclusivity its own spec sets (grouper/workloads.py): the workload annotation naming a level
    # the whole gang holds exclusively, and each role's SegmentRule
    exclusive_annotation: str | None = None
    segment_rule: Callable[[Mapping, RoleTemplate], SegmentRule] = annotations_only
    # whom an exclusive gang keeps away from (grouper/exclusive.py): its gangs always count as kept apart,
    # exclusive or not, and the gang (namespace/name) a pod of it names by its own labels
    always_apart: bool = False
    apart_gang: Callable[[Mapping], str | None] = unknown
    # the name the webhook lists it by among the kinds that number their pods themselves (its pods are held
    # back until the workload is seen); "": its pods carry an index only through pod-index-label
    numbers_pods: str = ""
