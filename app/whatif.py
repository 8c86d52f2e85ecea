"""`GET /debug/whatif/<gang>`: what would make a refused gang fit (topology/preemption/advice.py).

It reads a snapshot under the state lock (the one preemption's search reads, with the gangs a
PodDisruptionBudget protects and the choices whose evictions were refused) and searches without it.
It changes nothing.
"""
from __future__ import annotations

import numpy as np

from topology.fragmentation import closest_domains, unit_resource, whole_free_nodes
from topology.preemption import advise
from topology.preemption.advice import FITS, NEEDS_NODES
from topology.preemption.domains import Demand, Domains

from .extender.planning import plan_input
from .preemption import running_gangs, search_snapshot
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


def closest(state: ServiceState, plan, top: int = 3) -> list[dict]:
    """For a refused gang with a required (else preferred) level: the domains of that level that came
    closest and what each lacks: "rack-3: 2 of 4 pods fit; 2 of 4 nodes whole free; 6 nvidia.com/gpu
    held by ns/job-x (priority 100)". Call under the state lock."""
    cluster = state.cluster
    tree = cluster.topologies.get(plan.topology or "")
    if tree is None:
        return []
    bound = {slot: node for slot, (_, node) in state.bound.get(plan.key, {}).items()}
    try:
        inp = plan_input(state, plan.tree, bound=bound)
        layout = Domains(tree, len(cluster.nodes))
        demand = Demand.of(plan.tree, layout, inp.bound)
    except (ValueError, KeyError):
        return []
    level = demand.required if demand.required is not None else demand.preferred
    if level is None:
        return []
    roles = [(inp.requests[role], inp.usable.get(role, np.ones(len(cluster.nodes), dtype=bool)), count)
             for role, count in demand.need.items() if count > 0 and role in inp.requests]
    if not roles:
        return []
    names = list(cluster.resources.names)
    unit = unit_resource(names)
    column = names.index(unit) if unit in names else 0
    units, whole = whole_free_nodes(cluster.capacity.allocatable, cluster.capacity.free, ~cluster.unusable_nodes(),
                                    column)
    found = closest_domains(tree, level, inp.free, roles, top)
    owners = tree.node_domain[level]
    chosen = {domain for domain, _, _ in found}
    held: dict[int, dict[str, list]] = {domain: {} for domain in chosen}
    for gang in running_gangs(state):
        for pod in gang.pods.values():
            domain = int(owners[pod.node])
            if domain in chosen and pod.request[column] > 0:
                entry = held[domain].setdefault(gang.key, [0, gang.priority])
                entry[0] += int(pod.request[column])
    reserved: dict[int, dict[str, int]] = {domain: {} for domain in chosen}
    for key, usage in cluster.reservations.items():
        domain = int(owners[usage.node])
        owner = key.removeprefix("gang:").split("#", 1)[0]
        if domain in chosen and owner != plan.key and usage.request[column] > 0:
            reserved[domain][owner] = reserved[domain].get(owner, 0) + int(usage.request[column])
    answer = []
    for domain, fits, needed in found:
        nodes = tree.nodes_in(level, domain)
        free_nodes, unit_nodes = int(whole[nodes].sum()), int(units[nodes].sum())
        holders = sorted(held[domain].items(), key=lambda item: (-item[1][0], item[0]))
        holds = sorted(reserved[domain].items(), key=lambda item: (-item[1], item[0]))
        parts = [f"{fits} of {needed} pods fit", f"{free_nodes} of {unit_nodes} nodes whole free"]
        parts += [f"{amount} {unit} held by {gang} (priority {priority})" for gang, (amount, priority) in holders[:3]]
        parts += [f"{amount} {unit} reserved for gang {gang}" for gang, amount in holds[:2]]
        more = len(holders) - 3 + max(len(holds) - 2, 0)
        if more > 0:
            parts.append(f"and {more} more")
        value = tree.domain_value(level, domain)
        answer.append({"level": tree.levels[level].display, "domain": tree.domain_ids[level][domain],
                       "fits": fits, "needs": needed, "whole_free_nodes": free_nodes, "nodes": unit_nodes,
                       "holders": [{"gang": g, unit: a, "priority": p} for g, (a, p) in holders],
                       "reserved": [{"gang": g, unit: a} for g, a in holds],
                       "text": f"{value}: " + "; ".join(parts)})
    return answer
