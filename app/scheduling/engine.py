"""The gang logic behind the four verbs, top to bottom:

1. identify: which gang and slot a pod is (the grouper), or None for a plain pod;
2. plan: the first pod of a gang plans the whole group tree (the planner) and reserves every slot;
3. filter / prioritize: each pod is steered to its slot's node; a missing node re-plans the slot
   inside its segment's domain, then the group;
4. bind: placement annotations, then the Binding; the slot turns from reservation into usage;
5. node trouble and restarts: re-plan not-yet-bound slots in the same domain, continue partly
   bound gangs from the annotations of their bound pods.

Every method takes the state lock for its in-memory part; API calls happen outside it.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from grouper import minimum
from grouper.names import reservation_gang
from topology.cluster import Cluster, pod_key
from topology.groups import GroupTree, Slot
from topology.nodes import PodPlacementRules
from topology.quantity import format_units
from topology.resources import BASE_RESOURCES, pod_requests

from ..logs import fields, get_logger
from ..ports import ClusterWriter
from ..state.plans import BOUND, DONE, GANG_REFUSED, PLANNED, UNPLACED, GangPlan, SlotState
from ..settings import Settings
from ..state import ServiceState
from . import admitted, native_groups, planning, trusted, yielding
from .admitted import admitted_tree
from .binding import Binder
from .member_wait import MemberWait
from .outcome import FilterOutcome, gang_message, refuse_all
from .preemptor import Preemptor
from .victims import keep_helpful_victims
from .refusal_cache import refusal_key, still_refused
from .scores import NEUTRAL_SCORE, Scorer
from .stale import StaleGangs
from .unfit_gate import UnfitGangs
from .wakeups import WAKE_ANNOTATION, Wakeups, unschedulable_condition, wake, waiting  # noqa: F401 - WAKE_ANNOTATION: tests take it here

log = get_logger(__name__)

# kube-scheduler's cache trails our watch by a moment: capacity freed by a pod deletion (a victim, a finished
# job) may not be free in its view yet, so a slot's node can be missing from the candidates for a while.
SCHEDULER_LAG_GRACE = 20.0


class GangScheduler:
    """The engine, and the owner of the service's state: it builds the ServiceState (the sources feed
    `engine.state`) and is told by it, from construction on, which nodes turned bad (it re-plans there) and
    which pods changed (the preemptor's index of running pods). It records its decisions through
    `state.book`, the one writer of gang plans and slots."""

    def __init__(self, settings: Settings | None = None, *, clock: Callable[[], float] = time.time,
                 writer: Callable[[ServiceState], ClusterWriter | None] | None = None, elector=None):
        """Builds and owns its ServiceState (handing it `elector` and the engine's two observers), then
        `writer(state)`: the ClusterWriter every write goes through (the in-memory writer changes the state it
        is given; a live one ignores it). Without a writer, binds and evictions answer that none is
        configured."""
        self.preemptor: Preemptor | None = None
        self.state = state = ServiceState(settings, clock=clock, elector=elector,
                                          on_nodes_changed=self._nodes_changed, on_pod_changed=self._pod_changed)
        self.writer = writer(state) if writer is not None else None
        self.scorer = Scorer(state)
        self.binder = Binder(state, self.writer)
        self.preemptor = Preemptor(state, self.writer)   # tests may set it to None: a refused gang then simply waits
        self.seen_roles = admitted.SeenRoles()
        self.wakeups = Wakeups()
        self.stale = StaleGangs(state, self.writer, self.wakeups)
        self.unfit = UnfitGangs(state, self.writer)      # gates on gangs that cannot fit (issue 39)
        self.offered_only = _Recent()                # native gangs whose best domain kube-scheduler refused
        self.device_refusals = _Recent()             # kube-scheduler refusals of pods asking DRA devices, seen
        self.offered_domains = native_groups.OfferedDomains(state)   # quick refusals of a keyed gang's other domains
        self.member_wait = MemberWait(
            state.settings.member_wait, lambda: state.pods_added,
            lambda whole: state.metrics.member_waits.labels("whole" if whole else "short").inc(),
            on_seconds=state.metrics.member_wait_seconds.observe)

    def _nodes_changed(self, nodes: set[str]) -> None:
        self.revalidate(self.state, nodes)

    def _pod_changed(self, key: str | None, pod: Mapping | None) -> None:
        if self.preemptor is not None:       # its index of running pods (victims) follows the watch
            self.preemptor.running.update(key, pod)
        if pod is None and key is not None:  # not running: pending (or gone)
            self._refused_for_devices(key)

    def _refused_for_devices(self, key: str) -> None:
        """kube-scheduler marked a pending gang pod unschedulable and the pod asks DRA devices: its
        DynamicResources plugin answered "cannot allocate all claims" (or would have) and its preemption
        finds no candidate (the claims of the pods it would remove stay allocated in its view), so the
        preempt verb, where a gang's preemption starts on a full cluster, is never called. The pod's
        wake-up is made due now: the wake-up round plans the gang and starts its preemption
        (_preempt_for_parked). On device-plugin nodes (nvidia.com/gpu in their allocatable) NodeResourcesFit
        refuses and kube-scheduler's preemption calls the verb itself: nothing happens here. Each refusal
        (pod, condition) is looked at once. Called under the state lock, from the pod's event."""
        state = self.state
        if self.preemptor is None or state.settings.preemption == "off" or self.writer is None:
            return
        namespace, name = key.split("/", 1)
        pod = state.objects.get("Pod", namespace, name)
        condition = unschedulable_condition(pod) if waiting(pod) else None
        if condition is None or (pod.get("spec") or {}).get("schedulerName", "default-scheduler") \
                not in state.settings.scheduler_names:
            return
        seen = f"{(pod.get('metadata') or {}).get('uid')}@{condition.get('lastTransitionTime')}:{condition.get('message')}"
        if seen in self.device_refusals:
            return
        self.device_refusals.add(seen)
        if not state.cluster.asks_devices(pod.get("spec") or {}, namespace):
            return
        gang = self._unplanned_gang(pod)
        if gang is not None:
            now = state.clock()
            self.wakeups.refused(gang, namespace, name, now, ends_at=now - 0.5)      # due now

    # ------------------------------------------------------------------------------------------------
    # filter
    def filter(self, pod: Mapping, candidates: Sequence[str]) -> FilterOutcome:
        """`pod` is a request body: the decision is made from the service's copy of that pod."""
        watched, unknown = trusted.watched_pod(self.state, pod)
        if unknown:
            return self._refuse_unknown(pod, unknown, candidates)
        return self._filter(watched, candidates)

    def _refuse_unknown(self, body: Mapping, reason: str, candidates: Sequence[str]) -> FilterOutcome:
        """A pod the watch has not brought yet: refused for every node (no eviction helps) and woken again
        shortly, by which time the watch knows it."""
        self._wake_unknown(body)
        refusal = refuse_all(candidates, reason)
        refusal.unresolvable = True
        if len(candidates) > 1:
            refusal.failed = _said_once(refusal.failed, None, len(candidates))
        return refusal

    def _wake_unknown(self, body: Mapping) -> None:
        """Requeue a pod refused as not yet watched once the watch has had time to bring it."""
        now = self.state.clock()
        namespace, name = pod_key(body).split("/", 1)
        self.wakeups.refused(pod_key(body), namespace, name, now, now + trusted.UNKNOWN_POD_RETRY)

    def _filter(self, pod: Mapping, candidates: Sequence[str], asked: bool = True) -> FilterOutcome:
        """`asked`: kube-scheduler's call (not the service's own, for a parked pod)."""
        gang, outcome = self._decide(pod, candidates)
        if gang is not None and asked:
            self.wakeups.heard(gang, pod_key(pod), self.state.clock())
        picks = self.preemptor.max_picks if self.preemptor is not None else 0
        for _ in range(picks):                       # evictions chosen under the lock are sent outside it
            if not self.preemptor.queue or not self.preemptor.flush():
                break
            gang, outcome = self._decide(pod, candidates)      # an eviction was refused: choose again
        if outcome.everywhere > 1:
            planned = gang is not None and self.state.plans.get(gang) is not None
            outcome.failed = _said_once(outcome.failed, gang if planned else None, outcome.everywhere)
        if outcome.failed and not outcome.nodes:
            if not outcome.routine or log.isEnabledFor(logging.DEBUG):
                log.log(logging.DEBUG if outcome.routine else logging.INFO, "no node for pod", extra=fields(
                    pod=pod_key(pod), gang=gang, reason=next(iter(outcome.failed.values()))))
            if not outcome.final:
                namespace, name = pod_key(pod).split("/", 1)
                self.wakeups.refused(gang or pod_key(pod), namespace, name, self.state.clock(), outcome.ends_at)
        elif log.isEnabledFor(logging.DEBUG):
            log.debug("filter", extra=fields(pod=pod_key(pod), gang=gang, passing=len(outcome.nodes),
                                             candidates=len(candidates)))
        return outcome

    def _decide(self, pod: Mapping, candidates: Sequence[str]) -> tuple[str | None, FilterOutcome]:
        """(the pod's gang or None, the filter outcome)."""
        state = self.state
        with state.lock:
            quick = self.offered_domains.refusal(pod, candidates)
            if quick is not None:        # a keyed native gang's other domain, answered as last time
                return quick[0], _elsewhere_refusal(candidates, quick[1])
            state.expire_due()
            state.refresh()              # a stale model is rebuilt before the pod is planned
            try:
                ident = planning.identify(state, pod)
            except planning.GroupingError as err:
                refusal = refuse_all(candidates, str(err), unresolvable=True)
                refusal.final = True
                return None, refusal
            if ident is None:
                return None, self._plain_filter(pod, candidates)
            self.seen_roles.remember(ident.gang, ident.slot.role, pod)
            if state.plans.get(ident.gang) is None:
                exist, need = self._members(ident, pod)
                if exist < need:
                    refusal = refuse_all(candidates, minimum.waiting_message(ident.tree, exist, need),
                                         unresolvable=True)
                    refusal.awaiting = (ident.gang, need - exist)
                    return ident.gang, refusal
            plan = self._plan_of(ident, pod, candidates)
            if self.preemptor is not None:
                held = self.preemptor.intercept(plan, pod, candidates)
                if held is not None:                  # preempting for this gang, or a dry-run report
                    return ident.gang, held
            if plan.status == GANG_REFUSED:
                return ident.gang, refuse_all(candidates, plan.reason,
                                              unresolvable=self._preemption_cannot_help(plan))
            slot = self._claim_slot(plan, ident, pod_key(pod))
            if slot is None:
                return ident.gang, refuse_all(
                    candidates, f"gang {plan.key}: every {ident.slot.role} slot is held by another pod; "
                                f"pod {pod_key(pod)} has no place in the plan")
            state.book.touch(plan)
            slot_state = plan.slots[slot]
            if slot_state.status == BOUND:          # already running (a late retry): its node or nothing
                if slot_state.node in candidates:
                    return ident.gang, self._steer(slot_state)
                return ident.gang, refuse_all(candidates, f"gang {plan.key}: {slot} already runs on "
                                                                f"{slot_state.node}")
            if ident.native_key and slot_state.status == PLANNED and slot_state.node not in candidates:
                elsewhere = native_groups.other_domain(state, plan, ident.native_key, slot_state.node, candidates)
                if elsewhere:               # kube-scheduler tries domains one by one: not this one
                    self.offered_domains.remember(pod, plan, ident.native_key, slot_state.node)
                    return ident.gang, _elsewhere_refusal(candidates, elsewhere)
            if slot_state.status == PLANNED and slot_state.node not in candidates and not ident.native_key:
                lagging = self._scheduler_lags(plan, slot_state, candidates)
                if lagging:
                    refusal = refuse_all(candidates, lagging)
                    refusal.ends_at = plan.lagging[slot] + SCHEDULER_LAG_GRACE
                    return ident.gang, refusal
            if slot_state.status == UNPLACED or slot_state.node not in candidates:
                why = (f"planned node {slot_state.node} is not among the {len(candidates)} candidates"
                       if slot_state.node else "the slot has no node")
                # a slot left out (elastic, or after node trouble) only looks for room around the others
                self._replan(plan, [slot], why, "candidates", candidates={slot.role: list(candidates)},
                             whole_group=slot_state.status != UNPLACED)
                slot_state = plan.slots[slot]
                if slot_state.status == UNPLACED or slot_state.node not in candidates:
                    message = gang_message(plan, plan.reason or why)
                    if ident.native_key and not state.bound.get(plan.key):
                        # its domain, as kube-scheduler offers it, cannot hold it: plan afresh in the next
                        # domain offered (not our model's choice again, which this one just failed)
                        state.book.drop_plan(plan.key, f"kube-scheduler's {ident.native_key} domain lacks its nodes")
                        self.offered_only.add(plan.key)
                    return ident.gang, refuse_all(candidates, message)
            state.book.not_lagging(plan, slot)
            return ident.gang, self._steer(slot_state)

    def _preemption_cannot_help(self, plan: GangPlan) -> bool:
        """A refused gang kube-scheduler's preemption cannot help: it never fits, or app.preemption is not
        evicting for it (then the preempt verb offers no victim: see victims_for). Answered as
        unresolvable, kube-scheduler skips its dry run over every node on each retry."""
        return plan.never_fits or self.preemptor is not None

    def _members(self, ident, pod: Mapping) -> tuple[int, int]:
        """(pods of the gang that exist, pods it waits for before it is planned): see minimum.py."""
        state = self.state
        workload = planning.workload_of(state, pod) if state.settings.mode == "kubernetes" else None
        if minimum.creates_all_at_once(workload):
            return minimum.workload_members(ident.tree, state.workload_pods.count(pod), workload)
        return minimum.members(ident.tree)

    def _scheduler_lags(self, plan: GangPlan, slot_state: SlotState, candidates: Sequence[str]) -> str | None:
        """Why to wait rather than re-plan: the slot's node is fine in our model (usable, its capacity held
        for the slot) but not among kube-scheduler's candidates, for less than SCHEDULER_LAG_GRACE seconds.
        Past that, something we do not model excludes the node, and the caller re-plans."""
        if not slot_state.reserved or self._node_trouble(plan, slot_state) is not None:
            return None
        now = self.state.clock()
        since = self.state.book.lagging_since(plan, slot_state.slot, now)
        if now - since >= SCHEDULER_LAG_GRACE:
            return None
        return (f"gang {plan.key}: {slot_state.slot} is planned on {slot_state.node}, which kube-scheduler does "
                f"not offer yet (capacity freed moments ago); waiting up to {SCHEDULER_LAG_GRACE:g}s before "
                f"re-planning")

    def _steer(self, slot_state: SlotState) -> FilterOutcome:
        """Only the slot's node passes. The other candidates are left out of FailedNodes: the pod binds
        to its node in this cycle, and listing thousands of nodes would cost more than the filter."""
        return FilterOutcome([slot_state.node])


    def _plain_filter(self, pod: Mapping, candidates: Sequence[str]) -> FilterOutcome:
        """A pod outside any gang passes everywhere, except nodes where only reserved capacity is left."""
        cluster = self.state.cluster
        # every reservation holds one pod: the pods column alone says which nodes have any
        reserved_nodes = np.flatnonzero(cluster.capacity.reserved[:, cluster.resources.column["pods"]])
        if len(reserved_nodes) == 0:
            return FilterOutcome(candidates)             # echoed as received: no copy of thousands of names
        request = cluster.resources.vector(pod_requests(pod.get("spec") or {}))
        short = reserved_nodes[(cluster.free[reserved_nodes] < request).any(axis=1)]
        blocked = {cluster.node_names[index]: self._reserved_reason(index) for index in short.tolist()}
        if not blocked:
            return FilterOutcome(candidates)
        return FilterOutcome([n for n in candidates if n not in blocked],
                             {n: blocked[n] for n in candidates if n in blocked})

    def _reserved_reason(self, node: int) -> str:
        name = self.state.cluster.node_names[node]
        gangs = sorted({reservation_gang(key)
                        for key, usage in self.state.cluster.reservations.items() if usage.node == node})
        return f"capacity on {name} is reserved for gang {', '.join(gangs)}"

    # ------------------------------------------------------------------------------------------------
    # planning a gang
    def _plan_of(self, ident, pod: Mapping, candidates: Sequence[str]) -> GangPlan:
        state = self.state
        plan = state.plans.get(ident.gang)
        same = plan is not None and _same_slots(plan.tree, ident.tree)
        tree = ident.tree
        if not same:        # roles whose pods were told to wait: plan them as admitted, not as templated
            for role, seen in self.seen_roles.roles(ident.gang).items():
                if role != ident.slot.role and role in tree.roles:
                    tree = admitted_tree(tree, None, role, seen)
        tree = admitted_tree(tree, plan.tree if same else None, ident.slot.role, pod)
        changed = admitted.differs(plan.tree, tree) if same else []
        if changed and plan.status != GANG_REFUSED:
            self._replan_roles(plan, tree, changed, pod_key(pod))
        elif changed:
            state.book.drop_plan(plan.key, "the admitted pods differ from the refused shape")
            plan = None
        if plan is not None and plan.status == GANG_REFUSED and not still_refused(
                state, plan, tree, {ident.slot.role: candidates}):
            state.book.forget_refused(plan)
            plan = None
        if plan is not None and plan.status != GANG_REFUSED and not _same_slots(plan.tree, tree):
            log.info("gang changed shape; re-planning", extra=fields(gang=plan.key, pod=pod_key(pod)))
            state.book.drop_plan(plan.key, "the workload changed")
            plan = None
        if plan is None:
            # a native topology key: kube-scheduler offers one domain at a time; plan where our model places the
            # gang best, on every node, and answer each domain from that plan (native_groups.other_domain)
            anywhere = ident.native_key and ident.gang not in self.offered_only
            plan = self.plan_gang(tree, candidates=None if anywhere else {ident.slot.role: list(candidates)},
                                  pod=pod_key(pod))
        if plan.owner is None:
            state.book.set_owner(plan, ident.owner or planning.owner_key(pod))
        return plan

    def _replan_roles(self, plan: GangPlan, tree: GroupTree, roles: list[str], pod: str) -> None:
        """A later pod shows its role's admitted shape: that role's unbound slots move (sized and filtered
        from it) inside the gang's domains, every other slot and every bound pod stays."""
        log.info("pods differ from the plan; re-planning their roles with the admitted shape",
                 extra=fields(gang=plan.key, pod=pod, roles=roles))
        moving = [slot for slot, st in plan.slots.items() if slot.role in roles and st.status != BOUND]
        for slot in moving:                      # held with the old request: give it back before the swap
            self.state.book.release_slot(plan, plan.slots[slot])
        self.state.book.set_shape(plan, tree)
        self._replan(plan, moving, f"admitted shape of {', '.join(roles)}", "admitted")

    def plan_gang(self, tree: GroupTree, candidates: Mapping[str, Sequence[str]] | None = None,
                  pod: str | None = None) -> GangPlan:
        """Plan the whole tree (bound pods pinned), reserve every planned slot, store the plan."""
        state = self.state
        bound = {slot: node for slot, (_, node) in state.bound.get(tree.key, {}).items()}
        started = time.perf_counter()
        result = planning.plan(state, tree, bound=bound, candidates=candidates)
        waiting = ""
        if not result.placed and yielding.take_reserved(state, tree, bound, candidates):
            result = planning.plan(state, tree, bound=bound, candidates=candidates)
        if not result.placed:
            waiting = yielding.waiting_for(state, tree, bound, candidates)
        state.metrics.planning.labels("gang").observe(time.perf_counter() - started)
        now = state.clock()
        plan = GangPlan(tree.key, tree, GANG_REFUSED, topology=tree.topology, summary=gang_summary(tree, state.cluster),
                        created=now, expires=now + state.settings.reservation_ttl)
        if not result.placed:
            state.book.store_refused(plan, gang_message(plan, f"waiting for capacity {waiting}" if waiting
                                                               else result.reason or "does not fit"),
                                     refusal_key(state, tree, result, candidates), state.generation)
            state.metrics.refusals.inc()
            log.info("gang refused", extra=fields(gang=tree.key, pod=pod, reason=plan.reason))
            return plan
        state.book.store_placed(plan, result)
        log.info("gang planned", extra=fields(gang=tree.key, pod=pod, status=plan.status,
                                             slots=len(plan.slots), groups=_group_domains(plan)))
        return plan


    def _claim_slot(self, plan: GangPlan, ident, key: str) -> Slot | None:
        """The slot this pod takes: the one it already holds, else its own (role, index) when free, else
        (PodGroup pods and unnumbered pods are interchangeable) any free slot of its role."""
        held = plan.slot_of_pod(key)
        if held is not None:
            return held.slot
        own = plan.slots.get(ident.slot)
        if own is not None and self._is_free(own):
            return self.state.book.take(own, key)
        interchangeable = plan.tree.kind == "PodGroup" or ident.slot.index < 0 or own is None
        if not interchangeable:
            return None                  # its numbered slot is held by another pod (the old one lingers)
        for slot_state in sorted(plan.slots.values(), key=lambda s: s.slot):
            if slot_state.slot.role == ident.slot.role and self._is_free(slot_state):
                return self.state.book.take(slot_state, key)
        return None

    def _is_free(self, slot_state: SlotState) -> bool:
        if slot_state.status == BOUND:
            return False
        if slot_state.pod is None:
            return True
        namespace, name = slot_state.pod.split("/", 1)
        return self.state.find_pod(namespace, name) is None     # its earlier holder is gone

    # ------------------------------------------------------------------------------------------------
    # re-planning
    def _replan(self, plan: GangPlan, slots: list[Slot], cause: str, kind: str,
                candidates: Mapping[str, Sequence[str]] | None = None, whole_group: bool = True) -> bool:
        """Move `slots` to new nodes: first with every other slot pinned (so the segment and group keep
        their domains), then with only bound slots pinned. On failure the slots stay unplaced with the
        planner's reason; nothing else of the plan changes."""
        state = self.state
        # Bound and done slots never move. A done slot's pod Succeeded: it holds no room and is never
        # reserved again; nor is it pinned, as nothing runs there.
        settled = (BOUND, DONE)
        moving = [s for s in slots if s in plan.slots and plan.slots[s].status not in settled]
        if not moving:
            return True
        book = state.book
        for slot in moving:
            book.release_slot(plan, plan.slots[slot])
        index = state.cluster.node_index
        pinned = {s: st.node for s, st in plan.slots.items()
                  if s not in moving and st.node in index and st.status in (PLANNED, BOUND)}
        started = time.perf_counter()
        result = planning.plan(state, plan.tree, bound=pinned, candidates=candidates)
        if not result.placed and whole_group:
            for s, st in plan.slots.items():
                if st.status == PLANNED:
                    book.release_slot(plan, st)
            bound_only = {s: st.node for s, st in plan.slots.items() if st.status == BOUND and st.node in index}
            result = planning.plan(state, plan.tree, bound=bound_only, candidates=candidates)
            moving = [s for s, st in plan.slots.items() if st.status not in settled]
        state.metrics.planning.labels("replan").observe(time.perf_counter() - started)
        state.metrics.replans.labels(kind).inc(len(moving))
        if not result.placed:
            reason = gang_message(plan, result.reason or "no room left in its domain")
            book.replan_failed(plan, moving, slots, reason,
                               f"re-plan of {', '.join(map(str, slots))} failed ({cause}): {reason}")
            log.warning("re-plan failed", extra=fields(gang=plan.key, cause=cause, reason=plan.reason))
            return False
        moved = book.replanned(plan, result, moving, cause)
        log.info("gang re-planned", extra=fields(gang=plan.key, cause=cause, moved=moved))
        return True

    def revalidate(self, state: ServiceState, nodes: set[str]) -> None:
        """Nodes were deleted or turned NotReady / cordoned / tainted: re-plan the not-yet-bound slots
        planned there (inside their domains); note bound pods that now sit on a bad node."""
        troubled: dict[str, tuple[GangPlan, list[Slot], list[str]]] = {}
        for name in sorted(nodes):
            for plan, slot_state in state.plans.on_node(name):
                why = self._node_trouble(plan, slot_state)
                if why is None:
                    continue
                entry = troubled.setdefault(plan.key, (plan, [], []))
                if slot_state.status == BOUND:
                    state.book.note(plan, f"bound pod {slot_state.pod} ({slot_state.slot}) runs on {name}, "
                                          f"which is {why}")
                else:
                    entry[1].append(slot_state.slot)
                    entry[2].append(f"{name} {why}")
        for plan, slots, causes in troubled.values():
            if slots:
                self._replan(plan, slots, "node " + "; ".join(sorted(set(causes))), "node")

    def _node_trouble(self, plan: GangPlan, slot_state: SlotState) -> str | None:
        cluster = self.state.cluster
        index = cluster.node_index.get(slot_state.node or "")
        if index is None:
            return "deleted"
        reason = PodPlacementRules.from_spec(plan.tree.pod_spec(slot_state.slot.role)).allows(cluster.nodes[index])
        if reason is None and slot_state.status == PLANNED and not slot_state.reserved:
            return "without room"
        return reason

    def restore(self) -> None:
        """After a (re)start: give every partly or fully bound gang its plan back, pinned to its bound
        pods, so the rest of it lands in the same domains and nothing is booked twice."""
        state = self.state
        with state.lock:
            state.refresh()
            for gang, held in sorted(state.bound.items()):
                if not held or state.plans.get(gang) is not None:
                    continue
                pod_key_, _ = next(iter(held.values()))
                namespace, name = pod_key_.split("/", 1)
                pod = state.find_pod(namespace, name)
                try:
                    ident = planning.identify(state, pod) if pod else None
                except planning.GroupingError as err:
                    log.warning("cannot restore gang", extra=fields(gang=gang, reason=str(err)))
                    continue
                if ident is None or ident.gang != gang:
                    continue
                plan = self.plan_gang(ident.tree, pod=pod_key_)
                state.book.set_owner(plan, planning.owner_key(pod))
                state.book.note(plan, f"restored from {len(held)} bound pod(s)")

    # ------------------------------------------------------------------------------------------------
    # prioritize, bind, preempt (see scores.py, binding.py, preemption.py)
    def prioritize(self, pod: Mapping, candidates: Sequence[str]) -> list[int] | int:
        """A score 0..10 per candidate, or one int when every candidate gets the same (and for pods the
        watch has not brought yet); from the service's copy of the pod, not the body."""
        state = self.state
        pod, unknown = trusted.watched_pod(state, pod)
        if unknown:
            return NEUTRAL_SCORE
        with state.lock:
            state.refresh()
            try:
                ident = planning.identify(state, pod)
            except planning.GroupingError:
                ident = None
            if ident is None:                    # a pod of no gang: keep whole nodes and domains free
                return self.scorer.plain(pod, candidates)
            plan = state.plans.get(ident.gang)
            slot_state = plan.slot_for(pod_key(pod), ident.slot) if plan is not None else None
            if slot_state is None or slot_state.node is None:
                return NEUTRAL_SCORE
            return self.scorer.scores(plan, slot_state, candidates)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Annotate and bind one pod; '' on success (also for a retry of a bind already done)."""
        self.state.refresh()
        error, gang = self.binder.bind(namespace, name, uid, node)
        if not error:
            self.wakeups.bound(gang or f"{namespace}/{name}")
        return error

    def wake_refused(self) -> int:
        """Patch the wake annotation onto each refused pod whose wait is due and which still waits for a
        node (the leader only: kube-scheduler asks the leader). Returns the number of pods woken."""
        state = self.state
        if self.writer is None or not state.is_leader():
            return 0
        now = state.clock()
        woken = 0
        for due in self.wakeups.take_due(now):
            with state.lock:
                pod = state.find_pod(due.namespace, due.name)
            if not waiting(pod):
                continue
            self._preempt_for_parked(pod)
            try:
                wake(self.writer, due.namespace, due.name, now)
                woken += 1
            except Exception as err:  # noqa: BLE001 - gone meanwhile, or the API is down: the next refusal retries
                log.info("wake-up failed", extra=fields(pod=f"{due.namespace}/{due.name}", error=str(err)))
        if woken:
            state.metrics.wakeups.inc(woken)
        return woken

    def _preempt_for_parked(self, pod: Mapping) -> None:
        """A gang pod kube-scheduler's own filters rejected (a full cluster) reaches us only through the
        preempt verb; if its gang was still short then, nothing was planned or evicted, and the annotation
        of a wake-up does not move a pod that NodeResourcesFit rejected. Plan the gang now and start its
        preemption: the victims' deletion moves its pods."""
        if self._unplanned_gang_pod(pod):
            self._filter(pod, list(self.state.cluster.node_names), asked=False)

    def preempt(self, pod: Mapping, victims: Mapping[str, list[str]]) -> dict[str, list[str]]:
        """The subset of kube-scheduler's candidate victims (node -> pod UIDs) that helps this pod.

        On a full cluster kube-scheduler's own filters pass no node, so it never calls our filter and the
        preempt verb is the first we hear of the pod: plan the gang (and choose victims) here first.
        From the service's copy of the pod, not the body: a pod the watch has not brought yet gets none."""
        watched, unknown = trusted.watched_pod(self.state, pod)
        if unknown:      # kube-scheduler parks it as unschedulable: without a wake-up it waits for minutes
            log.info("preempt refused", extra=fields(reason=unknown))
            self._wake_unknown(pod)
            return {}
        pod = watched
        self.state.refresh()
        self._heard(pod)
        self._preempt_for_parked(pod)
        return keep_helpful_victims(self.state, pod, victims, self.preemptor)

    def _heard(self, pod: Mapping) -> None:
        """Note that kube-scheduler asked about this gang pod (the stale-gang rule wakes those it did not)."""
        with self.state.lock:
            try:
                ident = planning.identify(self.state, pod)
            except planning.GroupingError:
                return
        if ident is not None:
            self.wakeups.heard(ident.gang, pod_key(pod), self.state.clock())

    def _unplanned_gang_pod(self, pod: Mapping) -> bool:
        """A gang pod whose gang has no plan yet (or a refused one) and no preemption under way."""
        return self._unplanned_gang(pod) is not None

    def _unplanned_gang(self, pod: Mapping) -> str | None:
        """The gang of `_unplanned_gang_pod`, or None."""
        state = self.state
        if self.preemptor is None or state.settings.preemption == "off":
            return None
        with state.lock:
            try:
                ident = planning.identify(state, pod)
            except planning.GroupingError:
                return None
            if ident is None or ident.gang in self.preemptor.active:
                return None
            plan = state.plans.get(ident.gang)
            # a refused gang whose preemption is decided (or that never fits) was answered by the filter
            if plan is None or (plan.status == GANG_REFUSED and plan.preemption is None and not plan.never_fits):
                return ident.gang
            return None


# --------------------------------------------------------------------------------------------------


def _said_once(failed: dict[str, str], gang: str | None, count: int) -> dict[str, str]:
    """The one node of an unresolvable refusal, its reason saying it holds on every candidate, instead of
    the same reason once per node (megabytes at 16k nodes, parsed on kube-scheduler's loop): kube-scheduler
    counts the candidates left out as unresolvable too, without a reason of their own, so its event reads
    `0/N nodes are available: 1 <this reason>`."""
    node, reason = next(iter(failed.items()))
    where = f"; see /debug/plans/{gang}" if gang else ""
    return {node: f"{reason} (the same on all {count} nodes{where})"}


def _group_domains(plan: GangPlan) -> dict[str, str]:
    return {g.group: f"{g.level}={g.domain}" for g in plan.groups.values() if g.domain}


def _elsewhere_refusal(candidates: Sequence[str], message: str) -> FilterOutcome:
    refusal = refuse_all(candidates, message)
    refusal.final = refusal.unresolvable = refusal.routine = True
    return refusal


def gang_summary(tree: GroupTree, cluster: Cluster) -> str:
    """`16 pods x 8 nvidia.com/gpu`, or `1 chief x 4 cpu + 16 worker x 8 nvidia.com/gpu` for mixed roles."""
    counts: dict[str, int] = {}
    for slot in tree.slots():
        counts[slot.role] = counts.get(slot.role, 0) + 1
    parts = []
    for role, count in counts.items():
        parts.append((role, count, _main_request(cluster.pod_demand(tree.pod_spec(role), tree.namespace))))
    if len({p[2] for p in parts}) <= 1:
        total = sum(p[1] for p in parts)
        return f"{total} pods" + (f" x {parts[0][2]}" if parts and parts[0][2] else "")
    return " + ".join(f"{count} {role}" + (f" x {request}" if request else "") for role, count, request in parts)


def _main_request(requests: Mapping[str, int]) -> str:
    """The resource that matters most in a request: an extended resource (GPUs), else cpu."""
    extended = sorted(name for name in requests if name not in BASE_RESOURCES)
    for name in extended + ["cpu", "memory"]:
        if requests.get(name):
            return f"{format_units(name, requests[name])} {name}"
    return ""


def _same_slots(a: GroupTree, b: GroupTree) -> bool:
    """Both trees number the same slots (one shared group tree always does: admitted_tree keeps it)."""
    return a.root is b.root or a.slots() == b.slots()


class _Recent:
    """A bounded set (the oldest forgotten first)."""

    def __init__(self, limit: int = 4096):
        self._items: dict[str, None] = {}
        self._limit = limit

    def add(self, key: str) -> None:
        self._items.pop(key, None)
        self._items[key] = None
        while len(self._items) > self._limit:
            self._items.pop(next(iter(self._items)))

    def __contains__(self, key: object) -> bool:
        return key in self._items
