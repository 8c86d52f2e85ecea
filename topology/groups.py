"""The group tree the grouper builds and the planner places.

root (the gang: a workload or PodGroup) -> groups (replica types, PodGroup SubGroups) -> ... -> leaves
that own pod slots (role, index). Segments are leaves with `segment` set. Levels are written as users
wrote them (label, alias or tier name) and resolved against the topology by the planner.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Set
from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class Slot:
    """One pod of a gang: its role (replica type, lowercased) and its index within the role."""

    role: str
    index: int

    def __str__(self) -> str:
        return f"{self.role}-{self.index}"


@dataclass
class RoleSpec:
    """A set of identical pods (a replica type, or the pods of one PodGroup SubGroup)."""

    name: str
    replicas: int
    pod_spec: Mapping = field(default_factory=dict)   # pod template spec: requests, tolerations, selectors
    pod_labels: Mapping = field(default_factory=dict)  # its labels (pod affinity and spread selectors read them)


@dataclass(frozen=True)
class SegmentInfo:
    role: str
    index: int            # segment index within the role
    size: int             # the configured segment size S (the last segment may hold fewer pods)
    count: int            # number of segments of the role


@dataclass
class Group:
    name: str
    children: list["Group"] = field(default_factory=list)
    slots: list[Slot] = field(default_factory=list)          # leaves only
    min_member: int | None = None       # leaf: pods that must be placed (None = all); inner: pods of the subtree
    min_subgroup: int | None = None     # inner: children that must be satisfied (None = all)
    required_level: str | None = None
    preferred_level: str | None = None
    exclusive: bool = False             # no other gang may use the required domain
    segment: SegmentInfo | None = None

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def walk(self) -> Iterator["Group"]:
        yield self
        for child in self.children:
            yield from child.walk()

    def all_slots(self) -> list[Slot]:
        return [slot for group in self.walk() for slot in group.slots]

    def leaf_min(self) -> int:
        return len(self.slots) if self.min_member is None else min(self.min_member, len(self.slots))

    def satisfied_by(self, placed: Set[Slot]) -> bool:
        """Whether the pods in `placed` meet this group's minimums, as the planner counts a group done: a
        leaf its minMember (all by default); an inner group minSubGroup of its children (all by default)
        and minMember pods of its subtree."""
        if self.is_leaf:
            return sum(slot in placed for slot in self.slots) >= self.leaf_min()
        needed = len(self.children) if self.min_subgroup is None else self.min_subgroup
        if sum(child.satisfied_by(placed) for child in self.children) < needed:
            return False
        return sum(slot in placed for slot in self.all_slots()) >= (self.min_member or 0)


@dataclass
class GroupTree:
    """A gang: what the planner places as one unit."""

    namespace: str
    name: str                            # the PodGroup name, unique per namespace
    kind: str                            # workload kind (Job, PyTorchJob, ..., PodGroup)
    root: Group
    roles: dict[str, RoleSpec] = field(default_factory=dict)
    topology: str | None = None
    strategy: str | None = None          # per-workload override of binpack / spread
    priority: int = 0
    preemption_policy: str = "PreemptLowerPriority"
    # The priority is the gang object's own (a native PodGroup's priority or priorityClassName, as
    # kube-scheduler's workload-aware preemption reads it), not its pods': admission does not override it.
    priority_from_group: bool = False
    warnings: list[str] = field(default_factory=list)
    workload: str = ""                   # the name of the object the user submitted (Job, LWS, PodGroup, ...)
    # role -> the native PodGroup whose spec.resourceClaims its pods share (DRAWorkloadResourceClaims): a pod
    # spec of the role names the group's claims (topology/dra_requests.py podgroup_claims)
    podgroup_claims: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def groups(self) -> Iterator[Group]:
        return self.root.walk()

    def group(self, name: str) -> Group:
        for group in self.groups():
            if group.name == name:
                return group
        raise KeyError(name)

    def leaf_of(self, slot: Slot) -> Group:
        for group in self.groups():
            if slot in group.slots:
                return group
        raise KeyError(str(slot))

    def slots(self) -> list[Slot]:
        return self.root.all_slots()

    def pod_spec(self, role: str) -> Mapping:
        """The pod template spec of a role ({} for a role without a RoleSpec)."""
        spec = self.roles.get(role)
        return (spec.pod_spec if spec is not None else None) or {}
