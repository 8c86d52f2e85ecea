"""Gang preemption in the service: when a gang's mandatory pods do not fit, free one whole domain for it
in one step and hold it (topology/preemption chooses the domain and the victims).

1. intercept (under the state lock, from filter, once the gang's plan is known):
   - a refused gang with preemption `on`: choose victims, turn the plan into a reservation of the
     capacity they will free (nobody else may take it), queue their evictions and answer every node
     with `waiting for N victims to terminate in <domain> (preempted gang ...)`;
   - `dry-run`: the same choice, only reported (plan, /debug/plans, the FailedNodes reason);
   - a gang whose victims are still running: the same waiting answer; once they are gone the plan
     binds like any other.
2. flush (outside the lock, right after): the queued evictions through the ClusterWriter, all of them
   together, with events on the preemptor and the victims. A refused eviction (a PodDisruptionBudget)
   drops the reservation; the next decision picks again without that gang and that domain.
3. victims_for (the `preempt` verb): keep only kube-scheduler's victims that agree with our choice.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from prometheus_client import Counter

from grouper import owner_of
from grouper.names import MIRROR_ANNOTATION
from topology.cluster import Usage, is_bound_and_running, pod_key
from topology.groups import GroupTree
from grouper.affinity import selects
from topology.preemption import (PreemptionPlan, RunningGang, RunningPod, beyond_priority, cannot_preempt_clause,
                                 protected_by_budgets, select_victims)

from ..logs import fields, get_logger
from ..ports import ClusterWriter, EvictionRefused
from ..state import GANG_ANNOTATION, SLOT_ANNOTATION, ServiceState
from ..state.plans import GANG_REFUSED, GangPlan
from . import native_groups
from .outcome import gang_message, refuse_all
from .planning import _opted_in as planning_opted_in
from .planning import exclusive_occupancy, plan_input
from .refusal_cache import RefusalKey

log = get_logger(__name__)

MAX_PICKS = 3                     # choices per filter call when evictions are refused
EVICTING, WAITING, DONE, DRY_RUN, NOT_FOUND = "evicting", "waiting", "done", "dry-run", "not-found"
SEARCHING = "searching"           # the victim search runs in a thread (off the lock)
RESEARCH_SECONDS = 10.0           # a fruitless search is repeated at most this often, when new victims appear
HOLDING = (EVICTING, WAITING)     # the plan holds capacity its victims still use


@dataclass
class VictimPod:
    key: str
    uid: str | None
    node: str
    gang: str
    priority: int
    whole: bool
    pod: Mapping


@dataclass
class Preemption:
    """One choice of victims for one gang, from the decision to the victims' departure."""

    gang: str
    plan: GangPlan
    result: PreemptionPlan
    victims: list[VictimPod]
    place: str                                  # "leaf-b": the chosen domain's value
    preemptor: Mapping                          # the pod whose filter call chose (events go on it)
    status: str = EVICTING
    refused: dict[str, str] = field(default_factory=dict)

    def remaining(self, state: ServiceState) -> list[VictimPod]:
        """Victims still holding capacity (same pod, same UID, still bound and running)."""
        left = []
        for victim in self.victims:
            if victim.key not in state.cluster.pods:
                continue
            namespace, name = victim.key.split("/", 1)
            current = state.objects.get("Pod", namespace, name) or {}
            if victim.uid and (current.get("metadata") or {}).get("uid") not in (None, victim.uid):
                continue
            left.append(victim)
        return left

    def what(self) -> str:
        """`preempted gang research/job-b`, `preempted 2 spare pods of gang x`, ... for messages."""
        whole = sorted({v.gang for v in self.victims if v.whole})
        spare: dict[str, int] = {}
        for victim in self.victims:
            if not victim.whole:
                spare[victim.gang] = spare.get(victim.gang, 0) + 1
        parts = []
        if whole:
            parts.append(f"preempted gang{'s' if len(whole) > 1 else ''} {', '.join(whole)}")
        parts += [f"preempted {n} spare pod{'s' if n != 1 else ''} of gang {g}" for g, n in sorted(spare.items())]
        return "; ".join(parts)

    def to_json(self, state: ServiceState) -> dict:
        body = self.result.to_json(state.cluster.node_names)
        for entry, victim in zip(body["victims"], self.victims):
            entry["node"] = victim.node
        body.update({"status": self.status, "remaining": len(self.remaining(state)),
                     "refused": dict(self.refused)})
        return body


class Preemptor:
    max_picks = MAX_PICKS                        # the filter's choices when evictions are refused

    def __init__(self, state: ServiceState, writer: ClusterWriter | None):
        self.state = state
        self.writer = writer
        self.active: dict[str, Preemption] = {}  # gang -> its preemption in progress
        self.queue: list[Preemption] = []        # chosen, evictions not sent yet
        self.excluded: dict[str, tuple[set[str], set[str]]] = {}   # gang -> (protected gangs, avoided domains)
        self._flush_lock = threading.Lock()
        self.sender: threading.Thread | None = None          # the last eviction thread (blocking writers)
        self.searcher: threading.Thread | None = None        # the last victim search thread (blocking writers)
        self.searched: dict[str, tuple] = {}                 # gang -> (changes mark, time) of its last search
        self.running = RunningIndex(state)                   # running pods as victims, kept up to date
        self.counter = Counter("tas_extender_preemptions", "Gang preemption decisions, by outcome", ["outcome"],
                               registry=state.metrics.registry)

    # ------------------------------------------------------------------------------------------------
    # 1. the decision (under the state lock)
    def intercept(self, plan: GangPlan, pod: Mapping, candidates: Sequence[str]):
        """A FilterOutcome when preemption decides this filter answer, else None (the usual flow)."""
        state = self.state
        mode = state.settings.preemption
        self._prune()
        active = self.active.get(plan.key)
        if active is not None and active.plan is not plan:          # the plan was dropped meanwhile
            self._forget(active, "its plan was dropped")
            active = None
        if active is not None:
            left = active.remaining(state)
            if left:
                state.book.set_preemption(plan, active.to_json(state))
                return refuse_all(candidates, self._waiting(plan, active, len(left)))
            self._finish(active)
            return None
        if plan.status != GANG_REFUSED or mode == "off":
            return None
        if plan.preemption is None or self._new_victims(plan):       # once per refused plan, or new victims
            self._decide(plan, pod, mode)
        if plan.key in self.active:
            active = self.active[plan.key]
            return refuse_all(candidates, self._waiting(plan, active, len(active.victims)))
        if plan.preemption and plan.preemption.get("status") == SEARCHING:
            return self._unresolvable(candidates, f"{plan.reason}; looking for lower-priority pods to preempt")
        if plan.preemption and plan.preemption.get("status") == DRY_RUN:
            return self._unresolvable(candidates, f"{plan.reason}; dry-run preemption: would evict "
                                                  f"{len(plan.preemption['victims'])} pods in "
                                                  f"{plan.preemption['place']} ({plan.preemption['what']})")
        return None

    def _unresolvable(self, candidates: Sequence[str], message: str):
        """Not evicting for the gang (yet): the preempt verb offers kube-scheduler no victim for it."""
        return refuse_all(candidates, message, unresolvable=True)

    def _decide(self, plan: GangPlan, pod: Mapping, mode: str) -> None:
        """Choose victims for a refused plan. With a blocking writer (the API) the search runs in a
        thread on a snapshot taken now, without the state lock, and is committed under it if the cluster
        still allows it; in-memory (standalone, tests) it runs here."""
        if plan.never_fits:
            self.state.book.set_preemption(plan, {"status": NOT_FOUND,
                                                  "explanation": "it can never fit in this cluster: no eviction helps"})
            return
        protected, avoided = self.excluded.get(plan.key, (set(), set()))
        snapshot = self._snapshot(plan.tree)
        self.searched[plan.key] = (self.state.changes.mark(), self.state.clock())
        if snapshot is None:
            self.state.book.set_preemption(plan, {"status": NOT_FOUND, "explanation": "the gang cannot be planned"})
            return
        if not getattr(self.writer, "blocking", True):
            self._commit(plan, pod, mode, self._search(snapshot, protected, avoided))
            return
        self.state.book.set_preemption(plan, {"status": SEARCHING, "explanation": "looking for victims"})
        self.searcher = threading.Thread(target=self._search_and_commit, name="preemption-search", daemon=True,
                                         args=(plan, dict(pod), mode, snapshot, protected, avoided))
        self.searcher.start()

    def _search_and_commit(self, plan: GangPlan, pod: Mapping, mode: str, snapshot, protected, avoided) -> None:
        result = self._search(snapshot, protected, avoided, on_step=_Pacer().step)     # no lock held
        with self.state.lock:
            if self.state.plans.get(plan.key) is not plan or plan.status != GANG_REFUSED:
                return                                                  # planned or dropped meanwhile
            if result.found and result.victims and not self._still_holds(snapshot[0], result):
                self.state.book.set_preemption(plan, None)              # the cluster moved: search again
                return
            self._commit(plan, pod, mode, result)
        self.flush()

    def _new_victims(self, plan: GangPlan) -> bool:
        """A fruitless search may be repeated: pods of a lower priority started on nodes the gang could
        use since it ran (at most every RESEARCH_SECONDS)."""
        searched = self.searched.get(plan.key)
        if (plan.preemption or {}).get("status") != NOT_FOUND or searched is None:
            return False
        mark, when = searched
        if self.state.clock() - when < RESEARCH_SECONDS or not isinstance(plan.refusal, RefusalKey):
            return False
        return self.state.changes.victims_since(mark, plan.refusal.nodes, plan.tree.priority)

    def _snapshot(self, tree: GroupTree):
        return search_snapshot(self.state, tree, self.running)

    def _search(self, snapshot, protected, avoided, on_step=None) -> PreemptionPlan:
        """The victims at the gang's own priority; when there are none, what any priority would evict
        (the refusal then says so: "fits in X if Y (priority 50) is evicted; ... cannot preempt it").
        Runs off the lock (in a thread against the API): the running pods are grouped here."""
        inp, running, others, guarded = searched(self.state, snapshot)
        protected = set(protected) | set(guarded)
        result = select_victims(inp, running, protected=protected, avoid=avoided, occupied_count=others,
                                refused=True, on_step=on_step)
        if not result.found:
            beyond = beyond_priority(inp, running, protected=protected, avoid=avoided, occupied_count=others,
                                     on_step=on_step)
            if beyond.found and beyond.victims:
                result.advice = cannot_preempt_clause(inp.tree, beyond)
        return result

    def _still_holds(self, inp, result: PreemptionPlan) -> bool:
        """The cluster was not rebuilt, the chosen victims still run where they ran, and with them gone
        the plan still fits (other pods may have started meanwhile)."""
        cluster = self.state.cluster
        if list(cluster.node_names) != list(inp.node_names):
            return False
        free = cluster.free.copy()
        going = {victim.pod for victim in result.victims}
        for victim in result.victims:
            usage = cluster.pods.get(victim.pod)
            if usage is None or usage.node != victim.node:
                return False
            free[usage.node] += cluster.eviction_usage(victim.pod, going)
        need = np.zeros_like(free)
        for slot, node in result.plan.slots.items():
            if slot not in inp.bound:
                need[node] += inp.requests[slot.role]
        return bool((free >= need).all())

    def _commit(self, plan: GangPlan, pod: Mapping, mode: str, result: PreemptionPlan) -> None:
        state = self.state
        book = state.book
        if result is None:
            book.set_preemption(plan, {"status": NOT_FOUND, "explanation": "the gang cannot be planned"})
            return
        if not result.found or not result.victims:
            report = {"status": NOT_FOUND, "explanation": result.explanation,
                      "domains": [o.to_json() for o in result.outcomes]}
            if result.advice:
                report["advice"] = result.advice
            book.set_preemption(plan, report)
            book.note(plan, f"preemption: {result.explanation}")
            if result.advice:
                book.add_reason(plan, result.advice)
            self.counter.labels("not-found").inc()
            return
        preemption = Preemption(plan.key, plan, result, self._victim_pods(result), _value(result.domain),
                                dict(pod))
        if mode == "dry-run":
            preemption.status = DRY_RUN
            book.set_preemption(plan, {**preemption.to_json(state), "place": preemption.place,
                                       "what": preemption.what()})
            book.note(plan, f"dry-run preemption: would evict {len(result.victims)} pods; {result.explanation}")
            self.counter.labels("dry-run").inc()
            log.info("preemption dry-run", extra=fields(gang=plan.key, pod=pod_key(pod), domain=result.domain,
                                                       victims=[v.key for v in preemption.victims]))
            return
        book.hold_for_preemption(plan, result.plan)
        book.set_preemption(plan, preemption.to_json(state))
        book.note(plan, f"preempting {len(result.victims)} pods in {result.level} {preemption.place}: "
                        f"{result.explanation}")
        self.active[plan.key] = preemption
        self.queue.append(preemption)
        self.counter.labels("chosen").inc()
        log.info("preempting", extra=fields(gang=plan.key, pod=pod_key(pod), domain=result.domain,
                                           victims=[v.key for v in preemption.victims]))

    def _victim_pods(self, result: PreemptionPlan) -> list[VictimPod]:
        state = self.state
        victims = []
        for victim in result.victims:
            namespace, name = victim.pod.split("/", 1)
            pod = state.find_pod(namespace, name) or {"metadata": {"namespace": namespace, "name": name}}
            victims.append(VictimPod(victim.pod, (pod.get("metadata") or {}).get("uid"),
                                     state.cluster.node_names[victim.node], victim.gang, victim.priority,
                                     victim.whole, pod))
        return victims

    def _waiting(self, plan: GangPlan, active: Preemption, count: int) -> str:
        text = (f"waiting for {count} victim{'s' if count != 1 else ''} to terminate in {active.place} "
                f"({active.what()})")
        return gang_message(plan, text)

    def _finish(self, active: Preemption) -> None:
        active.status = DONE
        self.state.book.set_preemption(active.plan, active.to_json(self.state))
        self.state.book.note(active.plan, f"the {len(active.victims)} victims are gone; the plan binds")
        self.active.pop(active.gang, None)
        self.excluded.pop(active.gang, None)
        self.counter.labels("done").inc()

    def _prune(self) -> None:
        """Forget preemptions whose plan is gone (expired, or its workload deleted)."""
        for gang, active in list(self.active.items()):
            if self.state.plans.get(gang) is not active.plan:
                self._forget(active, "its plan was dropped")
        for gang in [g for g in self.searched if self.state.plans.get(g) is None]:
            del self.searched[gang]

    def _forget(self, active: Preemption, why: str) -> None:
        self.active.pop(active.gang, None)
        log.info("preemption abandoned", extra=fields(gang=active.gang, reason=why))

    # ------------------------------------------------------------------------------------------------
    # 2. the evictions (outside the state lock)
    def flush(self) -> bool:
        """Send the queued evictions. True when one was refused (the caller decides again). Against the
        API (a blocking writer) they go out from a thread, off the event loop; a refusal then drops the
        hold, and the gang's next filter call chooses again."""
        with self.state.lock:
            batch, self.queue = self.queue, []
        if not batch:
            return False
        if getattr(self.writer, "blocking", True):
            self.sender = threading.Thread(target=self._send, args=(batch,), name="preemption-evictions",
                                           daemon=True)
            self.sender.start()
            return False
        return self._send(batch)

    def _send(self, batch: list[Preemption]) -> bool:
        repick = False
        with self._flush_lock:
            for preemption in batch:
                repick |= self._evict_all(preemption)
        return repick

    def _evict_all(self, preemption: Preemption) -> bool:
        writer = self.writer
        if writer is None:
            preemption.refused["*"] = "no cluster writer configured"
            return self._refused(preemption)
        for victim in preemption.victims:
            namespace, name = victim.key.split("/", 1)
            try:
                writer.evict(namespace, name, victim.uid)
            except EvictionRefused as err:
                preemption.refused[victim.key] = str(err)
            except Exception as err:     # noqa: BLE001 - an API failure counts as a refusal: pick again
                preemption.refused[victim.key] = f"{type(err).__name__}: {err}"
        if preemption.refused:
            return self._refused(preemption)
        self._events(preemption)
        with self.state.lock:
            if self.active.get(preemption.gang) is preemption and preemption.status == EVICTING:
                preemption.status = WAITING
                self.state.book.set_preemption(preemption.plan, preemption.to_json(self.state))
        return False

    def _events(self, preemption: Preemption) -> None:
        writer = self.writer
        tree = preemption.plan.tree
        where = f"{preemption.result.level} {preemption.place}"
        gangs = ", ".join(sorted({v.gang for v in preemption.victims}))
        writer.event(preemption.preemptor, "Preempting",
                     f"Preempting {len(preemption.victims)} pods of {gangs} to place gang {preemption.gang} in {where}")
        for victim in preemption.victims:
            writer.event(victim.pod, "Preempted",
                         f"Preempted by gang {preemption.gang} (priority {tree.priority}) to place it in {where}")

    def _refused(self, preemption: Preemption) -> bool:
        """Drop the reservation; the next choice leaves out the refusing gangs and this domain."""
        state = self.state
        with state.lock:
            protected, avoided = self.excluded.setdefault(preemption.gang, (set(), set()))
            by_key = {v.key: v for v in preemption.victims}
            protected.update(by_key[k].gang for k in preemption.refused if k in by_key)
            if preemption.result.domain:
                avoided.add(preemption.result.domain)
            self.active.pop(preemption.gang, None)
            plan = preemption.plan
            state.book.set_preemption(plan, {**preemption.to_json(state), "status": "refused"})
            state.book.note(plan, f"eviction refused ({'; '.join(preemption.refused.values())}); choosing again")
            if state.plans.get(plan.key) is plan:
                state.book.drop_plan(plan.key, "an eviction was refused")
            self.counter.labels("refused").inc()
        log.info("eviction refused", extra=fields(gang=preemption.gang, refused=preemption.refused))
        for key, why in preemption.refused.items():
            victim = next((v for v in preemption.victims if v.key == key), None)
            if victim is not None and self.writer is not None:
                self.writer.event(preemption.preemptor, "PreemptionRefused",
                                   f"Eviction of {key} (gang {victim.gang}) refused: {why}", "Warning")
        return True

    # ------------------------------------------------------------------------------------------------
    # 3. the preempt verb
    def victims_for(self, tree: GroupTree, pod: Mapping, victims: Mapping[str, list[str]]) -> dict[str, list[str]]:
        """kube-scheduler's per-node victims (UIDs) reduced to those we chose for this gang: nodes outside
        our domain go, and so do victims we would not evict. Nothing while we are not preempting for it
        (a refused gang that no preemption helps, dry-run, or a choice not made yet)."""
        active = self.active.get(tree.key)
        if active is None:
            if self.state.settings.preemption == "dry-run":
                log.info("preemption dry-run: no victims offered", extra=fields(gang=tree.key, pod=pod_key(pod)))
            return {}
        nodes = self._domain_nodes(active.result, tree.topology)
        wanted = {v.uid for v in active.victims if v.uid}
        kept = {}
        for node, uids in victims.items():
            if node not in nodes:
                continue
            mine = [uid for uid in uids if uid in wanted]
            if mine:
                kept[node] = mine
        return kept

    def _domain_nodes(self, result: PreemptionPlan, topology: str | None) -> set[str]:
        cluster = self.state.cluster
        tree = cluster.topologies.get(topology or "")
        if tree is None or result.level in (None, "cluster"):
            return set(cluster.node_names)
        level = tree.level_index(result.level)
        domain = tree.domain_index[level].get(result.domain or "")
        if domain is None:
            return set()
        return {cluster.node_names[int(i)] for i in tree.nodes_in(level, domain)}


class _Pacer:
    """Half the time for the search thread: after each planner call it sleeps as long as the call took,
    so the event loop (plain pods' filters, binds) gets the interpreter at once (the GIL) most of the time."""

    def __init__(self) -> None:
        self.last = time.perf_counter()

    def step(self) -> None:
        time.sleep(min(time.perf_counter() - self.last, 0.05))
        self.last = time.perf_counter()


def _value(domain: str | None) -> str:
    return "the cluster" if domain in (None, "cluster") else domain.rsplit("/", 1)[-1]


# --------------------------------------------------------------------------------------------------
PLAIN_CONTROLLERS = {"ReplicaSet", "Deployment", "StatefulSet", "ReplicationController"}
NEVER_VICTIMS = {"DaemonSet", "Node"}           # they come back on the same node: evicting them frees nothing


class RunningIndex:
    """What the victim search needs of every running pod, kept as pods come and go (ServiceState's
    on_pod_changed): pod key -> (what evicting it breaks, its priority, its slot when we bound it). A
    search copies it and the cluster's usage (two dict copies, in C) under the lock and groups them in its
    own thread: nothing walks every pod under the lock (running_gangs took 0.3-0.6 s at 18,000 pods). Only
    the pods holding allocated DRA claims get their row computed there (what evicting them frees)."""

    def __init__(self, state: ServiceState):
        self.state = state
        self.pods: dict[str, tuple[str, int, str | None]] = {}
        self.update(None, None)

    def update(self, key: str | None, pod: Mapping | None) -> None:
        if key is None:                         # every pod listed again
            self.pods = {}
            for listed in self.state.objects.list("Pod"):
                if is_bound_and_running(listed):
                    self.update(pod_key(listed), listed)
            return
        group = victim_group(pod, key) if pod is not None else None
        if group is None:
            self.pods.pop(key, None)
            return
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        priority = native_groups.podgroup_priority(self.state, pod)
        if priority is None:
            priority = (pod.get("spec") or {}).get("priority")
        self.pods[key] = (group, priority if isinstance(priority, int) else 0,
                          annotations.get(SLOT_ANNOTATION, "") if annotations.get(GANG_ANNOTATION) else None)

    def snapshot(self) -> tuple[dict, dict, dict]:
        """Under the lock: (the index, what evicting each pod frees, elastic slots of the gangs we planned)."""
        state = self.state
        optional = {plan.key: frozenset(str(slot) for group in plan.tree.groups() if group.is_leaf
                                        for slot in group.slots[group.leaf_min():])
                    for plan in state.plans}
        optional = {k: v for k, v in optional.items() if v}
        return dict(self.pods), self._eviction_usage(optional), optional

    def _eviction_usage(self, optional: Mapping[str, frozenset]) -> dict:
        """The cluster's pod usage, with the devices of their allocated claims added for the pods holding
        some (Cluster.eviction_usage): a pod evicted only with its whole gang frees the claims it shares
        with the gang's other such pods; a pod that may go alone (elastic), only those it holds alone. Only
        the pods holding claims are looked at (none on a cluster without DRA)."""
        cluster = self.state.cluster
        usage = dict(cluster.pods)
        for key, sharing in cluster.claim_holders().items():
            entry = self.pods.get(key)
            if entry is None:
                continue
            gang = entry[0]
            alone = _may_go_alone(entry, optional.get(gang, ()))
            together = () if alone else [k for k in sharing if k in self.pods and self.pods[k][0] == gang
                                         and not _may_go_alone(self.pods[k], optional.get(gang, ()))]
            usage[key] = Usage(usage[key].node, cluster.eviction_usage(key, together))
        return usage


def _may_go_alone(entry: tuple[str, int, str | None], elastic: frozenset | tuple) -> bool:
    """An index entry's pod is an elastic pod of its gang (group_running's rule): it may be evicted alone."""
    return entry[2] is not None and entry[2] in elastic


def running_gangs(state: ServiceState, index: RunningIndex | None = None) -> list[RunningGang]:
    """Every running pod grouped as group_running does, from the preemptor's index (or, without one, an
    index built now). Call under the state lock."""
    return group_running(*(index or RunningIndex(state)).snapshot())


def group_running(index: Mapping, usage: Mapping, optional: Mapping[str, frozenset]) -> list[RunningGang]:
    """Every bound, running pod grouped into what an eviction would break: the gang we bound it for (its
    placement annotation), else its gang workload (a Job, a training job, an LWS group, a PodGroup, a
    pod that opts in with gang annotations), else the pod alone: pods of no gang (ReplicaSet,
    Deployment, StatefulSet pods without gang settings, bare pods) are victims one by one. DaemonSet and
    static (mirror) pods are never victims. A gang's priority is its highest pod priority; a gang we
    planned may lose its elastic pods (slots above their leaf's minimum), any other only whole.
    Pure: runs on RunningIndex.snapshot(), outside the lock."""
    members: dict[str, dict[str, RunningPod]] = {}
    priorities: dict[str, int] = {}
    elastic: dict[str, set[str]] = {}
    for key, (gang, priority, slot) in index.items():
        used = usage.get(key)
        if used is None:
            continue
        members.setdefault(gang, {})[key] = RunningPod(used.node, used.request)
        priorities[gang] = max(priorities.get(gang, -(1 << 31)), priority)
        if slot is not None and slot in optional.get(gang, ()):
            elastic.setdefault(gang, set()).add(key)
    return [RunningGang(gang, priorities[gang], pods, elastic=frozenset(elastic[gang]) if gang in elastic else None)
            for gang, pods in sorted(members.items())]


def _evictable(pod: Mapping, key: str) -> bool:
    """Preemption empties an exclusive domain of every pod it may evict (DaemonSet pods stay)."""
    return victim_group(pod, key) is not None


def victim_group(pod: Mapping, key: str) -> str | None:
    """What evicting this pod breaks: its gang's key, the pod's own key (a pod of no gang), or None
    (a DaemonSet or static pod: never a victim)."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if annotations.get(GANG_ANNOTATION):
        return annotations[GANG_ANNOTATION]
    if MIRROR_ANNOTATION in annotations:
        return None
    controller = next((ref for ref in metadata.get("ownerReferences") or [] if ref.get("controller")), None)
    if controller is not None and controller.get("kind") in NEVER_VICTIMS:
        return None
    owner = owner_of(pod) if pod else None
    if owner is None or (owner.kind in PLAIN_CONTROLLERS and not planning_opted_in(pod)):
        return key
    return owner.key
def search_snapshot(state: ServiceState, tree: GroupTree, index: RunningIndex | None = None):
    """What the victim search reads, copied under the lock: (planner input, the running pods' index and
    usage, occupancy), or None when the gang cannot be planned at all; `searched` completes it outside
    the lock. Preemption and the what-if advice both start from it, so they never disagree. `index`: the
    preemptor's, kept as pods come and go (without one, an index is built now from every pod)."""
    bound = {slot: node for slot, (_, node) in state.bound.get(tree.key, {}).items()}
    # exclusive groups: the same occupancy as the normal path; select_victims subtracts each choice's victims
    others = exclusive_occupancy(state, tree, also=_evictable)
    try:
        inp = plan_input(state, tree, bound=bound, others=others)
    except (ValueError, KeyError) as err:
        log.info("preemption impossible", extra=fields(gang=tree.key, reason=str(err)))
        return None
    return replace(inp, free=np.array(inp.free, copy=True)), (index or RunningIndex(state)).snapshot(), others


def searched(state: ServiceState, snapshot) -> tuple:
    """Outside the lock: (planner input, running gangs, occupancy, gangs a PodDisruptionBudget protects)."""
    inp, raw, others = snapshot
    running = group_running(*raw)
    return inp, running, others, budget_protected(state, running)


def budget_protected(state: ServiceState, running: Sequence[RunningGang]) -> dict[str, str]:
    """Gangs whose eviction a PodDisruptionBudget would refuse now (status.disruptionsAllowed) -> the
    budget: the search leaves them alone instead of choosing them and being refused."""
    budgets = []
    for pdb in state.objects.list("PodDisruptionBudget", "policy"):
        metadata = pdb.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        selector = (pdb.get("spec") or {}).get("selector")
        allowed = (pdb.get("status") or {}).get("disruptionsAllowed", 0)
        covered = []
        for gang in running:
            for key in gang.pods:
                pod_namespace, name = key.split("/", 1)
                if pod_namespace != namespace:
                    continue
                pod = state.objects.get("Pod", pod_namespace, name) or {}
                if selects(selector, (pod.get("metadata") or {}).get("labels") or {}):
                    covered.append(key)
        if covered:
            budgets.append((f"{namespace}/{metadata.get('name')}", allowed if isinstance(allowed, int) else 0, covered))
    if not budgets:
        return {}
    gang_of = {key: gang.key for gang in running for key in gang.pods}
    return protected_by_budgets(budgets, gang_of)
