"""Stale gangs, evicted as KAI's stalegangeviction action does.

A gang is stale while some of its pods are bound but fewer than its minimums (a PodGroup's minMember, a
SubGroup's, minSubGroup) and none has succeeded: half a gang that kube-scheduler cannot complete (a filter
we do not model refuses its other nodes) or that lost pods nobody replaces. It holds its GPUs and does no
work. Once it has been stale for its grace period, every bound pod is evicted and its plan dropped, so the
controller's replacements are planned again as a whole gang.

The grace period is the gang's own (grouper.staleness: its PodGroup's, workload's or pods'), else
`--staleness-grace-period` (60 s, as KAI's scheduler default); a negative one never evicts. A gang is not
stale while its plan is missing (it is being planned again), after one of its pods succeeded, while its
other pods wait for preemption victims to go (KAI counts them as pipelined), or while its controller
creates its pods one after another (an OrderedReady StatefulSet, a LeaderReady LWS, an ordered
JobSet, an MPIJob launched after its workers): such a gang runs below its minimum while it starts.

An eviction is never the first answer to a member the service has not heard from. kube-scheduler can park a
member in its queue with no event to move it (held at its own preemption gate while the victims went, then
its siblings bound; see docs/troubleshooting.md): the member never calls, and the gang looks stale. So each
unbound member kube-scheduler has not asked about since the gang turned stale is woken at once (the wake
annotation of app/scheduling/wakeups.py), and the grace period runs from the later of the gang turning stale
and the wake-up of each such member: the gang is evicted only when the members that were woken still did not
come (or came and were refused again).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from grouper.staleness import grace_period as configured_grace_period

from ..logs import fields, get_logger
from ..ports import ClusterWriter
from ..state import ServiceState
from ..state.plans import DONE, GangPlan
from grouper.minimum import creates_one_after_another
from .preemptor import HOLDING
from .wakeups import Wakeups, wake, waiting

log = get_logger(__name__)


@dataclass(frozen=True)
class Wake:
    gang: str
    pod: str                               # namespace/name of a member kube-scheduler has not asked about


@dataclass(frozen=True)
class Eviction:
    gang: str
    pods: list[tuple[str, str, str]]       # (namespace, name, uid) of every bound pod
    owner: Mapping | None                  # the workload or PodGroup, for the Event
    message: str


class StaleGangs:
    """When each gang turned stale, and its grace period (read once per stale spell); `evict_due()` evicts
    those past it (the leader only)."""

    def __init__(self, state: ServiceState, writer: ClusterWriter | None, wakeups: Wakeups | None = None):
        self.state = state
        self.writer = writer
        self.wakeups = wakeups or Wakeups()
        self.since: dict[str, tuple[float, float]] = {}     # gang -> (stale since, grace period)
        self.woken: dict[str, dict[str, float]] = {}        # gang -> member woken in this stale spell -> when

    def evict_due(self) -> list[str]:
        """Wake the members of stale gangs kube-scheduler has not asked about, and evict every gang whose
        grace period ran out (from its turning stale and from those wake-ups); the gangs evicted."""
        state = self.state
        if self.writer is None or not state.is_leader():
            return []
        with state.lock:
            now = state.clock()
            wakes, due = self._due(now)
        self._wake(wakes, now)
        for eviction in due:
            self._evict(eviction)
        return [eviction.gang for eviction in due]

    def _due(self, now: float) -> tuple[list[Wake], list[Eviction]]:
        state, wakes, due = self.state, [], []
        stale = {plan.key: plan for plan in state.plans if is_stale(state, plan)}
        for key in [key for key in self.since if key not in stale]:
            del self.since[key]
            self.woken.pop(key, None)
        for key, plan in stale.items():
            if key not in self.since:
                self.since[key] = (now, grace_period(state, plan))
                state.book.note(plan, _turned_stale(state, plan, self.since[key][1]))
            since, grace = self.since[key]
            unheard = self._unheard(plan, since)
            woken = self.woken.setdefault(key, {})
            wakes += [Wake(key, pod) for pod in unheard if pod not in woken]
            if grace < 0 or now - since < grace or not _woken_long_ago(woken, unheard, now - grace):
                continue
            pods = bound_pods(state, key)
            message = (f"gang {key}: {_below_minimum(state, plan)}, for {now - since:.0f}s (staleness grace "
                       f"period {grace:g}s); evicting them so that the gang is planned again whole")
            due.append(Eviction(key, pods, _owner(state, plan), message))
            state.book.drop_plan(key, "stale: fewer pods bound than the gang's minimum")
            self.since[key] = (now, grace)         # its pods are going: not again before another grace period
            self.woken.pop(key, None)
        return wakes, due

    def _unheard(self, plan: GangPlan, since: float) -> list[str]:
        """The gang's unbound members (pods that wait for a node) kube-scheduler has not asked about since
        `since`: those it called about before, and those holding a slot."""
        state = self.state
        heard = self.wakeups.last_heard(plan.key)
        bound = {pod for pod, _node in (state.bound.get(plan.key) or {}).values()}
        members = set(heard) | {slot.pod for slot in plan.slots.values() if slot.pod}
        return sorted(pod for pod in members - bound
                      if heard.get(pod, -1.0) < since and waiting(state.find_pod(*pod.split("/", 1))))

    def _wake(self, wakes: list[Wake], now: float) -> None:
        """Patch the wake annotation onto each member; one that was patched counts as woken from now on."""
        for member in wakes:
            namespace, name = member.pod.split("/", 1)
            try:
                wake(self.writer, namespace, name, now)
            except Exception as err:  # noqa: BLE001 - gone meanwhile, or the API is down: the next round retries
                log.info("stale gang member not woken", extra=fields(gang=member.gang, pod=member.pod, error=str(err)))
                continue
            with self.state.lock:
                plan = self.state.plans.get(member.gang)
                if member.gang in self.since and plan is not None:
                    self.woken.setdefault(member.gang, {})[member.pod] = now
                    self.state.book.note(plan, f"stale: woke {member.pod}, which kube-scheduler has not asked about "
                                               "since; the grace period runs from now for it")
            log.info("stale gang member woken", extra=fields(gang=member.gang, pod=member.pod))
            self.state.metrics.wakeups.inc()

    def _evict(self, eviction: Eviction) -> None:
        state = self.state
        log.warning("stale gang evicted", extra=fields(gang=eviction.gang, pods=len(eviction.pods),
                                                        reason=eviction.message))
        state.metrics.stale_evictions.inc()
        if eviction.owner is not None:
            self.writer.event(eviction.owner, "StaleGangEvicted", eviction.message, "Warning")
        for namespace, name, uid in eviction.pods:
            try:
                self.writer.evict(namespace, name, uid or None)
            except Exception as err:  # noqa: BLE001 - a PDB or the API: the gang stays stale and is retried
                log.warning("stale gang pod not evicted", extra=fields(
                    gang=eviction.gang, pod=f"{namespace}/{name}", error=str(err)))


def _woken_long_ago(woken: Mapping[str, float], members: list[str], before: float) -> bool:
    """Whether every one of `members` was woken by `before`."""
    return all(pod in woken and woken[pod] <= before for pod in members)


def _turned_stale(state: ServiceState, plan: GangPlan, grace: float) -> str:
    then = "never evicted (negative staleness grace period)" if grace < 0 else \
        f"its bound pods are evicted after {grace:g}s unless it recovers"
    return f"stale: {_below_minimum(state, plan)}; {then}"


def _below_minimum(state: ServiceState, plan: GangPlan) -> str:
    bound = len(state.bound.get(plan.key) or {})
    return f"{bound} of its {len(plan.tree.slots())} pods bound, below the gang's minimum"


def is_stale(state: ServiceState, plan: GangPlan) -> bool:
    bound = state.bound.get(plan.key) or {}
    if not bound or len(bound) >= len(plan.tree.slots()) or any(s.status == DONE for s in plan.slots.values()):
        return False
    if plan.tree.root.satisfied_by(set(bound)):
        return False
    if (plan.preemption or {}).get("status") in HOLDING:
        return False                      # its other pods wait for their victims to go (KAI: pipelined)
    return not creates_one_after_another(_owner(state, plan))    # still starting, one pod after another


def bound_pods(state: ServiceState, gang: str) -> list[tuple[str, str, str]]:
    out = []
    for pod_key, _node in (state.bound.get(gang) or {}).values():
        namespace, name = pod_key.split("/", 1)
        pod = state.find_pod(namespace, name) or {}
        out.append((namespace, name, (pod.get("metadata") or {}).get("uid") or ""))
    return out


def grace_period(state: ServiceState, plan: GangPlan) -> float:
    """Seconds this gang may stay stale (negative: forever): its PodGroup's, workload's or pods' own
    (grouper.staleness), else --staleness-grace-period."""
    first = next(iter((state.bound.get(plan.key) or {}).values()), None)    # (pod key, node)
    pods = [state.find_pod(*first[0].split("/", 1)) or {}] if first else []
    seconds, problems = configured_grace_period(_owner(state, plan), pods)
    for problem in problems:                       # KAI ignores an invalid value too, and says so
        log.warning("staleness grace period ignored", extra=fields(gang=plan.key, error=problem))
    return state.settings.staleness_grace_period if seconds is None else seconds


def _owner(state: ServiceState, plan: GangPlan) -> Mapping | None:
    if plan.owner is None:
        return None
    group, kind, namespace, name = plan.owner
    return state.objects.get(kind, namespace, name, group=group)

