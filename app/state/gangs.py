"""GangBook: the one writer of gang plans and slots.

Every change to a GangPlan or a SlotState (a slot's node, pod and status, whether it is reserved; a plan's
status, reason, expiry, shape, owner, preemption report and notes), to the PlanStore and to the
reservations they hold in the Cluster goes through a method here. The engine decides (plans, re-plans,
claims a slot, preempts) and records its decision here; the state's pod, node and workload events record
what the cluster did here. Everyone else reads. `tests/app/state/test_gang_owner.py` keeps it so.

The book is built by ServiceState and runs under its lock. It reads the cluster model as it is (never
rebuilding a stale one: see reserve_slot).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np

from grouper.exclusive import apart_owner, keeps_apart
from grouper.names import GANG_ANNOTATION, SLOT_ANNOTATION
from topology.cluster import Cluster, is_bound_and_running, pod_key
from topology.groups import GroupTree, Slot
from topology.nodes import PodPlacementRules

from ..logs import fields, get_logger
from .changes import NodeChanges
from .plans import (BOUND, DONE, GANG_BOUND, GANG_PLANNED, GANG_REFUSED, PLANNED, UNPLACED, GangPlan, PlanStore,
                    SlotState, parse_slot, reservation_key)

log = get_logger(__name__)


class GangBook:
    def __init__(self, model: Callable[[], Cluster], changes: NodeChanges, clock: Callable[[], float],
                 reservation_ttl: Callable[[], float], changed: Callable[[], None],
                 find_pod: Callable[[str], Mapping | None]):
        """`model`: the cluster model as last built; `changed`: called when a plan's outcome may differ
        (the state's generation); `find_pod`: the watched pod of a key."""
        self._model = model
        self._find_pod = find_pod
        self._changes = changes
        self._clock = clock
        self._ttl = reservation_ttl
        self._changed = changed
        self.plans = PlanStore()
        self.bound: dict[str, dict[Slot, tuple[str, str]]] = {}   # gang -> slot -> (pod key, node)
        self._bound_pod: dict[str, tuple[str, Slot]] = {}         # pod key -> (gang, slot)
        self._role_requests: dict[int, tuple] = {}     # id(pod spec) -> (spec, resource index, request row)

    # --- reservations -----------------------------------------------------------------------------------
    def role_request(self, plan: GangPlan, role: str) -> np.ndarray:
        """One pod's request row; computed once per pod spec and resource index (a 1,024-pod gang
        reserves 1,024 slots of one or two specs)."""
        spec, resources = plan.tree.pod_spec(role), self._model().resources
        kept = self._role_requests.get(id(spec))
        if kept is None or kept[0] is not spec or kept[1] is not resources:
            if len(self._role_requests) > 256:
                self._role_requests.clear()
            kept = self._role_requests[id(spec)] = (spec, resources, resources.vector(self._model().pod_demand(spec, plan.tree.namespace)))
        return kept[2]

    def reserve_slot(self, plan: GangPlan, state: SlotState, *, check_fit: bool = True) -> bool:
        """Hold the slot's capacity on its node. False (nothing held) when the node is gone, no longer
        usable for the role, or without room.

        Reservations read the model as it is, never rebuilding a stale one: they run inside pod events,
        and a rebuild there re-plans gangs on deleted nodes in the middle of the event that is changing
        the same slot (a slot ended up unplaced yet reserved). The rebuild reserves every held slot again
        on the new model anyway."""
        cluster = self._model()
        node = cluster.node_index.get(state.node or "")
        if node is None:
            return False
        request = self.role_request(plan, state.slot.role)
        if (plan.preemption or {}).get("status") in ("evicting", "waiting"):
            check_fit = False        # app.scheduling.preemptor: the room is still used by victims evicted for this plan
        if check_fit:
            rules = PodPlacementRules.from_spec(plan.tree.pod_spec(state.slot.role))
            if rules.allows(cluster.nodes[node]) is not None:
                return False
            if np.any(cluster.free[node] < cluster.holding(node, request, state.pod)):
                return False
        cluster.reserve(reservation_key(plan.key, state.slot), node, request, _apart(plan), state.pod)
        state.reserved = True
        return True

    def release_slot(self, plan: GangPlan, state: SlotState) -> None:
        if state.reserved:
            cluster = self._model()
            held = cluster.reservations.get(reservation_key(plan.key, state.slot))
            self._changes.note_freed(held.node if held is not None else None)
            cluster.release(reservation_key(plan.key, state.slot))
            state.reserved = False

    def release_plan(self, plan: GangPlan) -> None:
        for state in plan.slots.values():
            self.release_slot(plan, state)

    def adopt_placement(self, plan: GangPlan, result) -> None:
        """Fill the gang plan from a planner result (topology.plan.Plan): slots its pods already hold stay
        bound, every other placed slot is reserved on its node, elastic slots left out are unplaced."""
        cluster = self._model()
        held = self.bound.get(plan.key, {})
        plan.slots = {}
        names = cluster.node_names
        keys, nodes, requests = [], [], []
        by_role: dict[str, np.ndarray] = {}
        for slot, node_index in result.slots.items():
            node = names[node_index]
            if slot in held and held[slot][1] == node:
                plan.slots[slot] = SlotState(slot, node, BOUND, pod=held[slot][0])
                continue
            plan.slots[slot] = SlotState(slot, node, PLANNED, reserved=True)
            keys.append(reservation_key(plan.key, slot))
            nodes.append(node_index)
            request = by_role.get(slot.role)
            if request is None:
                request = by_role[slot.role] = self.role_request(plan, slot.role)
            requests.append(request)
        if keys:                             # every placed slot's capacity held in one update
            cluster.reserve_many(keys, np.array(nodes, dtype=np.int64), np.stack(requests), _apart(plan))
        for slot in result.unplaced:
            plan.slots[slot] = SlotState(slot, None, UNPLACED)
        plan.groups = dict(result.groups)

    def reserve_again(self) -> set[str]:
        """The model was rebuilt: hold every reserved slot again on it, and mark the pods of gangs kept
        apart; the nodes of slots that no longer fit (for on_nodes_changed)."""
        lost = set()
        for plan in self.plans:
            held = self.bound.get(plan.key, {})
            for state in plan.slots.values():
                if state.reserved:
                    state.reserved = False
                    if state.slot in held:           # bound meanwhile: its pod's usage replaces the hold
                        continue
                    if not self.reserve_slot(plan, state):
                        lost.add(state.node or "")
        return lost

    def recheck_node(self, name: str) -> bool:
        """A pod bound by someone else (the default scheduler runs beside us) may take room held for a
        gang: reserve that node's held slots again one by one; True when the node was overbooked (those
        left without room are re-planned by on_nodes_changed: inside their domain, else the whole gang)."""
        cluster = self._model()
        node = cluster.node_index.get(name)
        if node is None or not (cluster.free[node] < 0).any():
            return False
        held = [(plan, state) for plan, state in self.plans.on_node(name) if state.reserved]
        for plan, state in held:
            self.release_slot(plan, state)
        for plan, state in held:
            self.reserve_slot(plan, state)
        return True

    # --- plans --------------------------------------------------------------------------------------
    def store_refused(self, plan: GangPlan, reason: str, refusal, generation: int) -> GangPlan:
        """A new plan of a gang that does not fit (nothing reserved; it waits for a change, no TTL)."""
        plan.status, plan.reason, plan.refused_generation = GANG_REFUSED, reason, generation
        plan.refusal, plan.never_fits, plan.expires = refusal, refusal.never_fits, None
        self.plans.put(plan)
        self._mark_apart(plan.key, plan)
        return plan

    def store_placed(self, plan: GangPlan, result) -> GangPlan:
        """A new plan from a planner result that placed the gang: every slot reserved (or bound)."""
        self.adopt_placement(plan, result)
        plan.reason = result.reason if result.unplaced else ""
        _restatus(plan)
        self.plans.put(plan)
        self._mark_apart(plan.key, plan)
        self._changed()
        return plan

    def hold_for_preemption(self, plan: GangPlan, result) -> None:
        """A refused plan becomes the preemptor's plan: every slot reserved on its node now, so the
        capacity the victims free goes to nobody else."""
        plan.status, plan.reason, plan.refused_generation = PLANNED, "", -1
        self.adopt_placement(plan, result)
        plan.expires = self._clock() + self._ttl()
        plan.refresh_status()
        self._changed()

    def drop_plan(self, key: str, why: str) -> None:
        plan = self.plans.pop(key)
        if plan is not None:
            self.release_plan(plan)
            self._mark_apart(key, None)
            self._changed()
            log.info("plan dropped", extra=fields(gang=key, reason=why))

    def forget_refused(self, plan: GangPlan) -> None:
        """A refused plan (it holds nothing) that no longer holds: the gang plans afresh."""
        self.plans.pop(plan.key)
        self._mark_apart(plan.key, None)

    def expire(self, now: float) -> list[GangPlan]:
        """Drop plans whose reservations outlived the TTL without every pod arriving."""
        expired = self.plans.expired(now)
        for plan in expired:
            self.drop_plan(plan.key, f"reservations expired after {self._ttl():g}s "
                                     f"({plan.counts()[BOUND]} of {len(plan.slots)} pods bound)")
        return expired

    def drop_plans_of(self, owner: Callable[[tuple[str, str, str, str]], bool], why: Callable[[GangPlan], str]) -> None:
        for plan in list(self.plans):
            if plan.owner and owner(plan.owner):
                self.drop_plan(plan.key, why(plan))

    def touch(self, plan: GangPlan) -> None:
        """A pod of the gang came by: its reservations are held for another TTL."""
        plan.expires = self._clock() + self._ttl()

    def set_owner(self, plan: GangPlan, owner: tuple[str, str, str, str] | None) -> None:
        plan.owner = owner

    def set_shape(self, plan: GangPlan, tree: GroupTree) -> None:
        """The admitted pods show a role's shape (see engine._replan_roles): the plan keeps its slots."""
        plan.tree = tree

    def lagging_since(self, plan: GangPlan, slot: Slot, now: float) -> float:
        """When kube-scheduler first left the slot's node out of its candidates."""
        return plan.lagging.setdefault(slot, now)

    def not_lagging(self, plan: GangPlan, slot: Slot) -> None:
        plan.lagging.pop(slot, None)

    def set_preemption(self, plan: GangPlan, report: dict | None) -> None:
        """What the preemptor did for the plan (app/scheduling/preemptor.py); None: decide again."""
        plan.preemption = report

    def add_reason(self, plan: GangPlan, text: str) -> None:
        if text not in plan.reason:
            plan.reason = f"{plan.reason}; {text}"

    def note(self, plan: GangPlan, text: str) -> None:
        plan.note(text)

    # --- slots the engine moves -----------------------------------------------------------------------
    def take(self, plan: GangPlan, state: SlotState, pod: str) -> Slot:
        """The pod holds the slot now (and its reservation: the devices its claims get, once allocated,
        are not held twice; Cluster.hold_for). A finished slot (its pod Succeeded, then was deleted) is
        live again and unplaced: its old node may lie outside the domains the gang has moved to since, so
        it is placed again beside the gang's other pods."""
        state.pod = pod
        if state.reserved:
            self._model().hold_for(reservation_key(plan.key, state.slot), pod)
        if state.status == DONE:
            state.status, state.node = UNPLACED, None
        return state.slot

    def replan_failed(self, plan: GangPlan, moving: Iterable[Slot], asked: Iterable[Slot], reason: str,
                      note: str) -> None:
        """A re-plan found no room: the slots asked for stay unplaced, every other slot keeps (or takes
        back) its hold where it still fits, else is unplaced too."""
        moving, asked = set(moving), set(asked)
        for slot, state in plan.slots.items():
            if state.status in (BOUND, DONE):
                continue
            if slot in moving and slot in asked:
                state.node, state.status = None, UNPLACED
            elif not state.reserved and not self.reserve_slot(plan, state):
                state.node, state.status = None, UNPLACED
        plan.reason = reason
        plan.note(note)
        _restatus(plan)
        self._changed()

    def replanned(self, plan: GangPlan, result, moving: Iterable[Slot], cause: str) -> list[str]:
        """A re-plan placed the gang: each moving slot takes its new node (held without a fit check, the
        planner checked), or is unplaced (elastic); the moves made, as text."""
        names = self._model().node_names
        moved = []
        for slot in moving:
            state = plan.slots[slot]
            old = state.node
            node_index = result.slots.get(slot)
            if node_index is None:
                state.node, state.status = None, UNPLACED
                continue
            state.node, state.status = names[node_index], PLANNED
            self.reserve_slot(plan, state, check_fit=False)
            if state.node != old:
                moved.append(f"{slot} {old or '(none)'} -> {state.node}")
        plan.groups = dict(result.groups)
        plan.reason = result.reason if result.unplaced else ""
        plan.note(f"re-planned ({cause}): " + (", ".join(moved) if moved else "no slot moved"))
        _restatus(plan)
        self._changed()
        return moved

    # --- what the cluster did: pods -------------------------------------------------------------------
    def pods_listed(self, pods: Iterable[Mapping]) -> None:
        """Every pod was listed again: index the bound ones by gang slot."""
        self.bound.clear()
        self._bound_pod.clear()
        for pod in pods:
            if is_bound_and_running(pod):
                self._index_bound(pod)

    def reconcile(self) -> None:
        """After a relist of pods: slots whose pod vanished wait for a replacement again; slots whose
        pod is now bound turn into usage."""
        for plan in self.plans:                  # first what is bound now (it frees reservations) ...
            held = self.bound.get(plan.key, {})
            for slot, state in plan.slots.items():
                if state.status != BOUND and slot in held:
                    self.release_slot(plan, state)
                    (state.pod, state.node), state.status = held[slot], BOUND
        for plan in self.plans:                  # ... then what vanished (it takes reservations)
            held = self.bound.get(plan.key, {})
            for slot, state in plan.slots.items():
                if state.status == BOUND and state.pod and held.get(slot, ("",))[0] != state.pod:
                    self._bound_pod[state.pod] = (plan.key, slot)
                    self.bound.setdefault(plan.key, {})[slot] = (state.pod, state.node or "")
                    self.pod_left(state.pod)
            plan.refresh_status()

    def pod_deleted(self, key: str) -> None:
        """A deleted pod that held a not-yet-bound slot: the slot (still reserved) waits for a replacement
        now, not when the reservation's TTL ends."""
        for plan in self.plans:
            if plan.status == GANG_BOUND:      # every slot bound or done: no pod holds an unbound one
                continue
            state = plan.slot_of_pod(key)
            if state is not None and state.status != BOUND:
                state.pod = None
                if state.reserved:
                    self._model().hold_for(reservation_key(plan.key, state.slot), None)
                plan.note(f"pod {key} of slot {state.slot} was deleted before binding; the slot waits "
                          f"for a replacement")

    def pod_bound(self, pod: Mapping) -> None:
        """A pod of a gang is bound: its slot stops being a reservation and becomes usage."""
        found = self._index_bound(pod)
        if found is None:
            return
        gang, slot = found
        plan = self.plans.get(gang)
        if plan is None or slot not in plan.slots:
            return
        state = plan.slots[slot]
        self.release_slot(plan, state)
        state.status, state.node, state.pod = BOUND, pod["spec"]["nodeName"], pod_key(pod)
        plan.refresh_status()

    def pod_running(self, pod: Mapping) -> None:
        """A pod now counted in the model: mark it when exclusive gangs keep away from it."""
        key = pod_key(pod)
        gang = self._bound_pod.get(key, (None,))[0]
        plan = self.plans.get(gang) if gang is not None else None
        owner = apart_owner(pod, gang, plan.tree if plan is not None else None)
        if owner is not None:
            self._model().apart[key] = owner

    def pod_finished(self, key: str) -> None:
        """A pod of a gang Succeeded: its slot is done (no replacement comes); a gang whose every slot is
        done is finished and forgotten."""
        found = self._unbind(key)
        if found is None:
            return
        plan, state = found
        self.release_slot(plan, state)
        state.status = DONE
        if all(s.status == DONE for s in plan.slots.values()):
            self.plans.pop(plan.key)
            log.info("gang finished", extra=fields(gang=plan.key, pods=len(plan.slots)))
        else:
            plan.refresh_status()

    def pod_left(self, key: str) -> None:
        """A bound pod of a gang is gone or finished: its slot waits for a replacement, on the same node
        when it still has room (re-reserved with a fresh TTL), else to be re-planned in its domain."""
        found = self._unbind(key)
        if found is None or found[1].pod != key:
            return
        plan, state = found
        state.status, state.pod = PLANNED, None
        if not self.reserve_slot(plan, state):
            state.status = UNPLACED
        plan.expires = self._clock() + self._ttl()
        plan.note(f"pod {key} of slot {state.slot} left; the slot waits for a replacement"
                  + (f" on {state.node}" if state.status == PLANNED else ""))
        plan.refresh_status()

    def _index_bound(self, pod: Mapping) -> tuple[str, Slot] | None:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        gang, slot = annotations.get(GANG_ANNOTATION), parse_slot(annotations.get(SLOT_ANNOTATION, ""))
        if not gang or slot is None:
            return None
        key = pod_key(pod)
        self.bound.setdefault(gang, {})[slot] = (key, pod["spec"]["nodeName"])
        self._bound_pod[key] = (gang, slot)
        return gang, slot

    def _unbind(self, key: str) -> tuple[GangPlan, SlotState] | None:
        """The pod `key` no longer holds its gang slot (a gang left without bound pods is forgotten);
        (the gang's plan, the slot's state) when a plan has that slot."""
        gang_slot = self._bound_pod.pop(key, None)
        if gang_slot is None:
            return None
        gang, slot = gang_slot
        held = self.bound.get(gang)
        if held is not None and held.get(slot, ("",))[0] == key:
            del held[slot]
            if not held:
                del self.bound[gang]
        plan = self.plans.get(gang)
        if plan is None or slot not in plan.slots:
            return None
        return plan, plan.slots[slot]

    def _mark_apart(self, gang: str, plan: GangPlan | None) -> None:
        """The gang's bound pods, as exclusive gangs see them: its own when its plan keeps apart, else
        (no plan, or one that does not) whatever their LWS group says."""
        cluster = self._model()
        for key, _ in self.bound.get(gang, {}).values():
            if key in cluster.pods:
                owner = apart_owner(self._find_pod(key), gang, plan.tree if plan is not None else None)
                if owner is not None:
                    cluster.apart[key] = owner
                else:
                    cluster.apart.pop(key, None)


def _apart(plan: GangPlan) -> str | None:
    """The gang, for reservations exclusive gangs keep away from (grouper/exclusive.py)."""
    return plan.key if keeps_apart(plan.tree) else None


def _restatus(plan: GangPlan) -> None:
    plan.status = GANG_PLANNED
    plan.refresh_status()
