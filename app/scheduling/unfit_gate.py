"""A gang that cannot fit leaves kube-scheduler's queue (issue 39): the webhook gates its pods at creation
(spec.schedulingGates: FITS_GATE) and this module lifts the gate the moment the gang fits.

kube-scheduler requeues every unschedulable member of a refused gang on every cluster event, and each
retry costs every other pod a filter cycle. A gated pod is not in its queue at all.

- `should_gate` (the webhook, on a pod's admission): only a gang with no plan or a refused one, nothing
  bound, that is refused on the cluster as it is now and that eviction cannot help (it never fits even on
  the empty cluster, or preemption is off). Read-only: the planner's answer is kept here, in the refusal
  cache's terms (refusal_cache.RefusalKey), never in the plan store, so the next member is not planned again.
- `release_due` (a background thread, every second): a gated gang is checked again only when room freed
  where it could help (still_refused says so: at most once per change batch); when it fits, or when any of
  its pods has been gated for `gate_unfit_bound` seconds whatever the check says, every member's gate is
  removed at once. Pods are found from the watch (a full sweep at start and every few seconds, so gates
  set before a restart, or by another replica's webhook, are lifted too).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from grouper.names import FITS_GATE
from topology.cluster import pod_key
from topology.groups import GroupTree

from ..logs import fields, get_logger
from ..ports import ClusterWriter, gate_index
from ..state import ServiceState
from ..state.plans import GANG_REFUSED, GangPlan
from . import planning
from .admitted import admitted_tree
from .refusal_cache import never_fits, refusal_key, still_refused

log = get_logger(__name__)

LOCK_WAIT = 0.05          # the webhook never waits longer for the state lock: unknown, so not gated
FITTED_KEPT = 10_000      # gangs remembered as fitting at admission (their later members are not planned again)
SWEEP_PERIOD = 5.0        # seconds between full scans of the watched pods for our gate


@dataclass
class _Gated:
    group_tree: GroupTree | None = None
    pods: dict[str, float] = field(default_factory=dict)     # namespace/name -> when first seen gated
    refused: GangPlan | None = None                           # the refusal the gate stands on


def _admitted(identity, pod: Mapping) -> GroupTree | None:
    """The gang's tree with its role's spec as the API server admits the pod (ExtendedResourceToleration's GPU
    tolerations, defaulted requests: admitted.py), which the plan must see; None for a gang of several roles,
    whose other roles are known only from their template: never gated."""
    if len(identity.tree.roles) != 1:
        return None
    return admitted_tree(identity.tree, None, identity.slot.role, pod)


class UnfitGangs:
    def __init__(self, state: ServiceState, writer: ClusterWriter | None):
        self.state, self.writer, self.clock = state, writer, state.clock
        self._gangs: dict[str, _Gated] = {}
        self._lock = threading.Lock()
        self._swept = float("-inf")
        self._fitted: OrderedDict[str, None] = OrderedDict()   # gangs that fitted at a member's admission

    @property
    def enabled(self) -> bool:
        return bool(self.state.settings.gate_unfit_gangs) and self.writer is not None

    # ------------------------------------------------------------------------------------------------
    # the webhook's question
    def should_gate(self, pod: Mapping, identity, scheduler_name: str | None, dry_run: bool = False) -> bool:
        """Whether this gang pod (as it will be created, by `scheduler_name`) gets FITS_GATE."""
        if not self.enabled or scheduler_name not in self.state.settings.scheduler_names:
            return False
        tree = _admitted(identity, pod)
        if tree is None or identity.gang in self._fitted or self.state.stale:   # one plan per gang; a model
            return False                                                          # awaiting a rebuild: unknown
        if not self.state.lock.acquire(timeout=LOCK_WAIT):
            return False
        try:
            refused = self._refused_now(identity.gang, tree)
        finally:
            self.state.lock.release()
        if refused is None:
            self._remember_fitted(identity.gang)
        elif not dry_run:
            with self._lock:
                gated = self._gangs.setdefault(identity.gang, _Gated())
                gated.group_tree, gated.refused = tree, refused
                gated.pods.setdefault(pod_key(pod), self.clock())
        return refused is not None

    def _remember_fitted(self, gang: str) -> None:
        with self._lock:
            self._fitted[gang] = None
            self._fitted.move_to_end(gang)
            while len(self._fitted) > FITTED_KEPT:
                self._fitted.popitem(last=False)

    def _refused_now(self, gang: str, tree: GroupTree) -> GangPlan | None:
        """The refusal (a plan-shaped record, never stored in the plan store) that shows the gang cannot
        fit now and eviction cannot help; None when it may fit, or may fit by eviction. Caller holds the lock."""
        state = self.state
        if state.bound.get(gang):
            return None
        plan = state.plans.get(gang)
        if plan is not None and plan.status != GANG_REFUSED:
            return None
        with self._lock:
            known = self._gangs.get(gang)
            known = known.refused if known is not None else None
        for refusal in (plan, known):
            if refusal is not None and still_refused(state, refusal, tree):
                return refusal if self._eviction_cannot_help(refusal) else None
        result = planning.plan(state, tree, bound={})
        if result.placed:
            return None
        refusal = GangPlan(gang, tree, GANG_REFUSED, refusal=refusal_key(state, tree, result),
                           never_fits=never_fits(result))
        return refusal if self._eviction_cannot_help(refusal) else None

    def _eviction_cannot_help(self, refusal: GangPlan) -> bool:
        return refusal.never_fits or self.state.settings.preemption == "off"

    # ------------------------------------------------------------------------------------------------
    # lifting
    def release_due(self) -> int:
        """Lift the gates of every gated gang that fits now or waited too long. Returns the pods un-gated."""
        state = self.state
        if self.writer is None or not state.is_leader():
            return 0
        if self.clock() - self._swept >= SWEEP_PERIOD:
            self._sweep()
        with self._lock:
            gangs = list(self._gangs.items())
        lifted = 0
        for gang, gated in gangs:
            why = self._why_lift(gang, gated)
            if why:
                lifted += self._lift(gang, gated, why)
        return lifted

    def _sweep(self) -> None:
        """Every watched pod of ours that carries FITS_GATE joins its gang's record (start, other replicas)."""
        state = self.state
        names = state.settings.scheduler_names
        now = self.clock()
        with state.lock:
            gated = [pod for pod in state.objects.list("Pod") if gate_index(pod, FITS_GATE, names) is not None]
            found = []
            for pod in gated:
                try:
                    ident = planning.identify(state, pod)
                except planning.GroupingError:
                    ident = None
                found.append((pod_key(pod), ident, pod))
        self._swept = now
        with self._lock:
            for key, ident, pod in found:
                gang = ident.gang if ident is not None else key     # no gang (any more): lifted alone
                record = self._gangs.setdefault(gang, _Gated())
                record.group_tree = record.group_tree or (_admitted(ident, pod) if ident is not None else None)
                record.pods.setdefault(key, now)
            present = {key for key, _, _ in found}
            for gang, record in list(self._gangs.items()):      # gone, bound or un-gated by someone else
                record.pods = {key: since for key, since in record.pods.items()
                               if key in present or now - since < SWEEP_PERIOD}
                if not record.pods:
                    del self._gangs[gang]

    def _why_lift(self, gang: str, gated: _Gated) -> str | None:
        bound = self.state.settings.gate_unfit_bound
        if gated.pods and self.clock() - min(gated.pods.values()) >= bound:
            return f"gated for {bound:g}s"
        if gated.group_tree is None:
            return "not a gang"
        self.state.refresh()                     # nodes added or changed: the model is rebuilt first
        with self.state.lock:
            if gated.refused is not None and still_refused(self.state, gated.refused, gated.group_tree):
                return None                      # nothing changed that could make it fit: no planning
            refused = self._refused_now(gang, gated.group_tree)
        if refused is None:
            return "it may fit now"
        gated.refused = refused
        return None

    def _lift(self, gang: str, gated: _Gated, why: str) -> int:
        with self._lock:
            self._gangs.pop(gang, None)
        names = self.state.settings.scheduler_names
        lifted = 0
        for key in gated.pods:
            namespace, name = key.split("/", 1)
            try:
                lifted += bool(self.writer.ungate_pod(namespace, name, FITS_GATE, names))
            except Exception as err:  # noqa: BLE001 - the API is down: the next sweep finds it gated again
                log.warning("un-gating failed", extra=fields(pod=key, error=str(err)))
        log.info("gang un-gated", extra=fields(gang=gang, pods=lifted, reason=why))
        return lifted

    def gated(self) -> dict[str, int]:
        """gang -> pods known gated (the debug view and tests)."""
        with self._lock:
            return {gang: len(record.pods) for gang, record in self._gangs.items()}
