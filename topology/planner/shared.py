"""Gangs whose pods name an unallocated ResourceClaim (topology/dra_requests.py SharedClaim).

kube-scheduler's DynamicResources plugin allocates such a claim while it schedules the first pod naming
it, on that pod's node (node-local devices), and every other pod naming it is then filtered to where the
claim is allocated. So the plan chooses one node per claim: there the claim's devices are taken once
from the free matrix and the pods naming it are confined to it; the rest of the gang is planned around
that. Candidate nodes are those whose free devices serve the claim, the ones holding most of its pods
and then the tightest first; the first choice that places the gang wins, after a few tries the first
refusal is the answer.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ..plan import Plan, PlanInput

EXCLUDED = "not where its shared claim is allocated"
TRIES = 16               # choices of nodes planned before the first refusal is the answer


def _candidates(inp: PlanInput, claim) -> list[int]:
    """Nodes that can serve the claim now and may host its pods, best first."""
    nodes = len(inp.node_names)
    roles = [role for role in claim.roles if role in inp.requests]
    allowed = np.ones(nodes, dtype=bool)
    for role in roles:
        allowed &= np.asarray(inp.usable.get(role, np.ones(nodes, dtype=bool)), dtype=bool)
    columns = np.flatnonzero(claim.demand > 0)
    taken = np.broadcast_to(claim.demand, inp.free.shape)
    if inp.links:
        taken = inp.links.apply(np.arange(nodes), taken)
    after = inp.free - taken
    allowed &= (after[:, columns] >= 0).all(axis=1) if columns.size else True
    hosted = np.zeros(nodes, dtype=np.int64)
    for role in roles:
        request = inp.requests[role]
        cols = np.flatnonzero(request > 0)
        fit = (np.maximum(after[:, cols], 0) // request[cols]).min(axis=1) if cols.size else \
            np.full(nodes, claim.roles[role])
        hosted += np.minimum(fit, claim.roles[role])
    tight = after[:, columns].sum(axis=1) if columns.size else np.zeros(nodes, dtype=np.int64)
    found = np.flatnonzero(allowed)
    order = np.lexsort((found, tight[found], -hosted[found]))
    return found[order][:TRIES].tolist()


def _confine(inp: PlanInput, claims, choice) -> PlanInput | None:
    """The input with each claim's devices taken on its chosen node and its pods confined there; None
    when two claims chosen on one node do not fit together."""
    free = np.array(inp.free, dtype=np.int64, copy=True)
    usable = dict(inp.usable)
    excluded = dict(inp.excluded)
    for claim, node in zip(claims, choice):
        taken = inp.links.apply(node, claim.demand) if inp.links else claim.demand
        free[node] -= taken
        if (free[node][claim.demand > 0] < 0).any():
            return None
        for role in claim.roles:
            if role in usable:
                only = np.zeros(len(inp.node_names), dtype=bool)
                only[node] = bool(usable[role][node])
                left = int(np.count_nonzero(usable[role])) - int(only[node])
                if left:
                    excluded[EXCLUDED] = max(excluded.get(EXCLUDED, 0), left)
                usable[role] = only
    return replace(inp, free=free, usable=usable, shared=[], excluded=excluded)


def plan_shared(inp: PlanInput, plan_once: Callable[[PlanInput], Plan]) -> Plan:
    claims = [c for c in inp.shared if not any(role in inp.unplaceable for role in c.roles)]
    if not claims:
        return plan_once(replace(inp, shared=[]))
    options = [_candidates(inp, claim) for claim in claims]
    for claim, nodes in zip(claims, options):
        if not nodes:
            return Plan(placed=False, reason=f"{claim.where} {claim.asks}, for {claim.pods} pod"
                        f"{'s' if claim.pods != 1 else ''} that share it: no node has its devices free",
                        details={"never_fits": False, "claims": {claim.claim: None}})
    first = None
    tried = 0
    for choice in itertools.product(*options):
        trial = _confine(inp, claims, choice)
        if trial is None:
            continue
        plan = plan_once(trial)
        if plan.placed:
            plan.details["claims"] = {c.claim: inp.node_names[n] for c, n in zip(claims, choice)}
            return plan
        first = first or plan
        tried += 1
        if tried >= TRIES:
            break
    return first or Plan(placed=False, reason="the claims the gang's pods share fit on no node together",
                         details={"never_fits": False})
