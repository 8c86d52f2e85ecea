"""`GET /debug/whatif/<gang>`: what would make a refused gang fit (topology/preemption/advice.py).

It reads a snapshot under the state lock (the one preemption's search reads, with the gangs a
PodDisruptionBudget protects and the choices whose evictions were refused) and searches without it.
It changes nothing.
"""
from __future__ import annotations

from topology.preemption import advise
from topology.preemption.advice import FITS, NEEDS_NODES

from .preemption import search_snapshot
from .state import ServiceState
from .state.plans import GANG_REFUSED


class UnknownGang(KeyError):
    pass


def whatif(state: ServiceState, gang: str) -> dict:
    with state.lock:
        plan = state.plans.get(gang)
        if plan is None:
            known = ", ".join(sorted(p.key for p in state.plans)) or "none"
            raise UnknownGang(f"no plan for gang {gang}; known gangs: {known}")
        head = {"gang": gang, "status": plan.status, "reason": plan.reason}
        if plan.status != GANG_REFUSED:
            placement = {str(slot): s.node for slot, s in sorted(plan.slots.items(), key=lambda i: str(i[0]))
                         if s.node}
            return {**head, "verdict": FITS, "text": f"the gang is {plan.status}: nothing needs to go",
                    "placement": placement, "victims": []}
        preemptor = getattr(state.gangs, "preemptor", None)
        protected, avoided = (preemptor.excluded.get(gang, (set(), set())) if preemptor is not None
                              else (set(), set()))
        snapshot = search_snapshot(state, plan.tree)
        node_names = list(state.cluster.node_names)
    if snapshot is None:
        return {**head, "verdict": NEEDS_NODES, "text": "the gang cannot be planned on this cluster at all",
                "victims": []}
    inp, running, others, guarded = snapshot
    advice = advise(inp, running, protected=set(protected) | set(guarded), avoid=avoided, occupied_count=others)
    body = {**head, **advice.to_json(node_names, inp.resources.names)}
    body["protected_by_budgets"] = dict(sorted(guarded.items()))
    body["preemption"] = state.settings.preemption
    return body
