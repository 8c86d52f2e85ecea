"""What the service remembers about each gang: its plan (slot -> node, group -> domain), which slots
are reserved or bound, its status and the reasons behind it, and when its reservations expire.

The store holds no capacity itself: reservations live in the Cluster under `reservation_key`, and
ServiceState keeps the two in step.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from topology.groups import GroupTree, Slot
from topology.plan import GroupPlacement

PLANNED, BOUND, UNPLACED, DONE = "planned", "bound", "unplaced", "done"   # slot states (done: Succeeded)
# Gang states: pending (some slot lost its node and waits for room), planned (every slot has a node,
# not all bound yet), bound (every slot bound), refused (the gang does not fit; nothing reserved).
GANG_PENDING, GANG_PLANNED, GANG_BOUND, GANG_REFUSED = "pending", "planned", "bound", "refused"
GANG_STATES = (GANG_PENDING, GANG_PLANNED, GANG_BOUND, GANG_REFUSED)


def reservation_key(gang: str, slot: Slot) -> str:
    return f"gang:{gang}#{slot}"


def parse_slot(text: str) -> Slot | None:
    """`worker-3` -> Slot("worker", 3); None when the text is not of that form."""
    role, _, index = text.rpartition("-")
    return Slot(role, int(index)) if role and index.isdigit() else None


@dataclass
class SlotState:
    slot: Slot
    node: str | None                 # planned (or bound) node; None while unplaced
    status: str = PLANNED            # planned | bound | unplaced | done (its pod Succeeded)
    pod: str | None = None           # namespace/name of the pod that holds the slot
    reserved: bool = False           # capacity held in the Cluster under reservation_key

    def to_json(self) -> dict:
        return {"slot": str(self.slot), "role": self.slot.role, "index": self.slot.index,
                "node": self.node, "status": self.status, "pod": self.pod, "reserved": self.reserved}


@dataclass
class GangPlan:
    key: str                                   # namespace/name of the gang (its PodGroup name)
    tree: GroupTree
    status: str
    topology: str | None = None
    slots: dict[Slot, SlotState] = field(default_factory=dict)
    groups: dict[str, GroupPlacement] = field(default_factory=dict)
    reason: str = ""                           # refusal, or note about elastic pods left out
    summary: str = ""                          # "16 pods x 8 nvidia.com/gpu"
    created: float = 0.0
    expires: float | None = None               # reservations are dropped after this time
    refused_generation: int = -1               # cluster generation the refusal was computed at
    refusal: object | None = None              # app.extender.refusal_cache.RefusalKey: when to plan again
    never_fits: bool = False                   # refused even on the empty cluster: no eviction can help
    notes: list[str] = field(default_factory=list)   # re-plans and node troubles, newest last
    lagging: dict[Slot, float] = field(default_factory=dict)   # slot -> when kube-scheduler first left its node out
    preemption: dict | None = None             # set by app.preemption: victims, domain, status
    owner: tuple[str, str, str, str] | None = None   # (api group, kind, namespace, name): its workload or PodGroup

    def slot_of_pod(self, pod: str) -> SlotState | None:
        for state in self.slots.values():
            if state.pod == pod:
                return state
        return None

    def slot_for(self, pod: str, slot: Slot) -> SlotState | None:
        """The slot a pod holds, else the slot of its own (role, index); None for a refused plan."""
        if self.status == GANG_REFUSED:
            return None
        return self.slot_of_pod(pod) or self.slots.get(slot)

    def counts(self) -> dict[str, int]:
        counts = {PLANNED: 0, BOUND: 0, UNPLACED: 0, DONE: 0}
        for state in self.slots.values():
            counts[state.status] += 1
        return counts

    def note(self, text: str, keep: int = 50) -> None:
        self.notes.append(text)
        del self.notes[:-keep]

    def refresh_status(self) -> None:
        if self.status == GANG_REFUSED:
            return
        states = [s.status for s in self.slots.values()]
        if any(s == UNPLACED for s in states):
            self.status = GANG_PENDING
        elif states and all(s in (BOUND, DONE) for s in states):
            self.status = GANG_BOUND
        else:
            self.status = GANG_PLANNED

    def to_json(self, *, with_slots: bool = True) -> dict:
        body = {
            "gang": self.key,
            "namespace": self.tree.namespace,
            "name": self.tree.name,
            "workload": self.tree.workload or self.tree.name,
            "priority": self.tree.priority,
            "never_fits": "can never fit" in self.reason,
            "kind": self.tree.kind,
            "status": self.status,
            "topology": self.topology,
            "summary": self.summary,
            "reason": self.reason,
            "pods": len(self.tree.slots()),
            "counts": self.counts(),
            "created": self.created,
            "expires": self.expires,
            "groups": [{"group": g.group, "level": g.level, "domain": g.domain, "spans": dict(g.spans)}
                       for g in self.groups.values()],
            "notes": list(self.notes),
            "warnings": list(self.tree.warnings),
        }
        if self.preemption is not None:
            body["preemption"] = self.preemption
        if with_slots:
            body["slots"] = [self.slots[s].to_json() for s in sorted(self.slots)]
        return body


class PlanStore:
    """Gang plans by key. Not thread-safe by itself: ServiceState serialises access."""

    def __init__(self) -> None:
        self._plans: dict[str, GangPlan] = {}

    def get(self, key: str) -> GangPlan | None:
        return self._plans.get(key)

    def put(self, plan: GangPlan) -> None:
        self._plans[plan.key] = plan

    def pop(self, key: str) -> GangPlan | None:
        return self._plans.pop(key, None)

    def __iter__(self) -> Iterator[GangPlan]:
        return iter(list(self._plans.values()))

    def __len__(self) -> int:
        return len(self._plans)

    def expired(self, now: float) -> list[GangPlan]:
        return [p for p in self._plans.values()
                if p.expires is not None and p.expires <= now and p.status != GANG_BOUND]

    def on_node(self, node: str) -> Iterator[tuple[GangPlan, SlotState]]:
        for plan in list(self._plans.values()):
            for state in plan.slots.values():
                if state.node == node:
                    yield plan, state

    def status_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(GANG_STATES, 0)
        for plan in self._plans.values():
            counts[plan.status] = counts.get(plan.status, 0) + 1
        return counts

    def reservation_count(self) -> int:
        return sum(1 for p in self._plans.values() for s in p.slots.values() if s.reserved)

    def to_json(self) -> list[dict]:
        return [self._plans[k].to_json(with_slots=False) for k in sorted(self._plans)]
