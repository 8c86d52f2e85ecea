"""Reservations yield to priority (issue 14 item 3).

A gang the planner refuses may still fit in capacity that other gangs only reserve:
- reserved by gangs of a lower priority with no pod bound yet: it takes that capacity; those gangs lose
  their plans and plan again (or wait) when their next pod is filtered;
- reserved by gangs it may not take from: it waits, and its refusal names them and when their hold
  expires ("reserved for gang batch/x until 12:03").
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from grouper.names import reservation_gang, reservation_prefix
from topology.groups import GroupTree, Slot
from topology.plan import Plan

from ..state.plans import BOUND, GANG_REFUSED, GangPlan
from ..state import ServiceState
from . import planning


def yielding_plans(state: ServiceState, tree: GroupTree) -> list[GangPlan]:
    """Plans that must give their reserved capacity to `tree`: lower priority, no pod bound yet, not
    holding capacity for a preemption in progress."""
    return [plan for plan in state.plans
            if plan.key != tree.key and plan.status != GANG_REFUSED and plan.tree.priority < tree.priority
            and not any(s.status == BOUND for s in plan.slots.values())
            and (plan.preemption or {}).get("status") not in ("evicting", "waiting")]


def free_without(state: ServiceState, plans: Iterable[GangPlan]) -> np.ndarray:
    """The free matrix with the reservations of `plans` given back."""
    cluster = state.cluster
    free = cluster.free.copy()
    prefixes = tuple(reservation_prefix(plan.key) for plan in plans)
    if prefixes:
        for key, usage in cluster.reservations.items():
            if key.startswith(prefixes):
                free[usage.node] += usage.request
    return free


def holders(state: ServiceState, plans: Iterable[GangPlan], result: Plan) -> list[GangPlan]:
    """Of `plans`, those holding reservations on a node `result` uses."""
    cluster = state.cluster
    used = set(result.slots.values())
    nodes_of = {}
    for key, usage in cluster.reservations.items():
        nodes_of.setdefault(reservation_gang(key), set()).add(usage.node)
    return [plan for plan in plans if nodes_of.get(plan.key, set()) & used]


def take_reserved(state: ServiceState, tree: GroupTree, bound: Mapping[Slot, str],
                  candidates: Mapping[str, Sequence[str]] | None) -> list[str]:
    """Drop the lower-priority plans whose reserved capacity lets `tree` fit; their keys (empty when
    that does not help)."""
    lower = yielding_plans(state, tree)
    if not lower:
        return []
    result = planning.plan(state, tree, bound=bound, candidates=candidates, free=free_without(state, lower))
    if not result.placed:
        return []
    taken = holders(state, lower, result)
    for plan in taken:
        state.book.note(plan, f"its reservations went to gang {tree.key} (priority {tree.priority} > "
                              f"{plan.tree.priority}); it plans again when its next pod is filtered")
        state.book.drop_plan(plan.key, f"reservations taken by higher-priority gang {tree.key}")
    return [plan.key for plan in taken]


def waiting_for(state: ServiceState, tree: GroupTree, bound: Mapping[Slot, str],
                candidates: Mapping[str, Sequence[str]] | None) -> str:
    """'reserved for gang batch/x until 12:03' when other gangs' reservations are what keeps `tree`
    out, else ''."""
    others = [plan for plan in state.plans if plan.key != tree.key and plan.status != GANG_REFUSED]
    if not others:
        return ""
    result = planning.plan(state, tree, bound=bound, candidates=candidates, free=free_without(state, others))
    if not result.placed:
        return ""
    parts = []
    for plan in sorted(holders(state, others, result), key=lambda p: p.key):
        until = f" until {time.strftime('%H:%M', time.gmtime(plan.expires))}" if plan.expires else ""
        parts.append(f"reserved for gang {plan.key}{until}")
    return "; ".join(parts)
