"""`GET /debug/whatif/<gang>`: what would make a refused gang fit (topology/preemption/advice.py).

It reads a snapshot under the state lock (the one preemption's search reads, with the gangs a
PodDisruptionBudget protects and the choices whose evictions were refused) and searches without it.
It changes nothing.
"""
from __future__ import annotations

from datetime import datetime

import numpy as np

from topology.fragmentation import closest_domains, unit_resource, whole_free_nodes
from topology.preemption import advise
from topology.preemption.advice import FITS, NEEDS_NODES
from topology.preemption.domains import Demand, Domains

from .admitted import admitted_tree
from .engine import gang_summary
from .planning import identify, plan_input
from .preemptor import running_gangs, search_snapshot, searched
from .wakeups import refused_by_kube_scheduler
from ..state import ServiceState
from ..state.plans import GANG_REFUSED


UNPLANNED = "unplanned"


class UnknownGang(KeyError):
    pass


def whatif(state: ServiceState, gang: str, preemptor=None) -> dict:
    """`preemptor`: the engine's (gangs and domains it leaves out after refused evictions), when it has one."""
    with state.lock:
        plan = state.plans.get(gang)
        if plan is None:
            return _unplanned(state, gang, preemptor.running if preemptor is not None else None)
        head = {"gang": gang, "status": plan.status, "reason": plan.reason}
        if plan.status != GANG_REFUSED:
            placement = {str(slot): s.node for slot, s in sorted(plan.slots.items(), key=lambda i: str(i[0]))
                         if s.node}
            return {**head, "verdict": FITS, "text": f"the gang is {plan.status}: nothing needs to go",
                    "placement": placement, "victims": []}
        protected, avoided = (preemptor.excluded.get(gang, (set(), set())) if preemptor is not None
                              else (set(), set()))
        snapshot = search_snapshot(state, plan.tree, preemptor.running if preemptor is not None else None)
        node_names = list(state.cluster.node_names)
    if snapshot is None:
        return {**head, "verdict": NEEDS_NODES, "text": "the gang cannot be planned on this cluster at all",
                "victims": []}
    inp, running, others, guarded = searched(state, snapshot)
    advice = advise(inp, running, protected=set(protected) | set(guarded), avoid=avoided, occupied_count=others)
    body = {**head, **advice.to_json(node_names, inp.resources.names)}
    body["protected_by_budgets"] = dict(sorted(guarded.items()))
    body["preemption"] = state.settings.preemption
    return body


def _unplanned(state: ServiceState, gang: str, index=None) -> dict:
    """A gang with no plan: its pods never reached the extender. kube-scheduler asks extenders only about
    nodes its own filters passed, so a pod that fits on no single node (every node has a GPU or two in use
    and it wants all eight) is refused before we hear of it. Found by a pending pod of the gang (by the
    gang's key or its workload's name), it gets the same advice. Call under the state lock."""
    tree = _pending_gang(state, gang)
    if tree is None:
        known = ", ".join(sorted(p.key for p in state.plans)) or "none"
        raise UnknownGang(f"no plan and no pending pod for gang {gang} (a gang key namespace/pg-..., or its "
                          f"workload namespace/name); known gangs: {known}")
    head = {"gang": tree.key, "status": UNPLANNED,
            "reason": "no pod of the gang reached the extender (kube-scheduler's own filters left no node)"}
    snapshot = search_snapshot(state, tree, index)
    node_names = list(state.cluster.node_names)
    if snapshot is None:
        return {**head, "verdict": NEEDS_NODES, "text": "the gang cannot be planned on this cluster at all",
                "victims": []}
    inp, running, others, guarded = searched(state, snapshot)
    advice = advise(inp, running, protected=set(guarded), occupied_count=others, refused=False)
    return {**head, **advice.to_json(node_names, inp.resources.names),
            "protected_by_budgets": dict(sorted(guarded.items())), "preemption": state.settings.preemption}


def unplanned_gangs(state: ServiceState) -> list[dict]:
    """Gangs with no plan whose pending pods kube-scheduler marked unschedulable: its own filters left no
    node, so the extender never heard of them. Shaped as `/debug/plans` entries (status `unplanned`) so the
    page shows them beside the refused ones, with the same what-if advice. Call under the state lock."""
    found: dict[str, dict] = {}
    names = state.settings.scheduler_names
    for pod in state.objects.list("Pod"):
        spec = pod.get("spec") or {}
        if spec.get("nodeName") or spec.get("schedulerName", "default-scheduler") not in names:
            continue
        message = refused_by_kube_scheduler(pod)
        if message is None:
            continue
        try:
            ident = identify(state, pod)
        except ValueError:                   # GroupingError: refused by our filter with its reason, if asked
            continue
        if ident is None or state.plans.get(ident.gang) is not None:
            continue
        created = _timestamp((pod.get("metadata") or {}).get("creationTimestamp"))
        entry = found.get(ident.gang)
        if entry is None:
            tree = ident.tree
            found[ident.gang] = entry = {
                "gang": tree.key, "namespace": tree.namespace, "name": tree.name,
                "workload": tree.workload or tree.name, "priority": tree.priority, "never_fits": False,
                "kind": tree.kind, "status": UNPLANNED, "topology": tree.topology, "summary": gang_summary(tree, state.cluster),
                "reason": f"no pod of the gang reached the extender: kube-scheduler's own filters left no node "
                          f"({message})",
                "pods": len(tree.slots()), "counts": {"pending": 0}, "created": created, "expires": None,
                "groups": [], "warnings": []}
        entry["counts"]["pending"] += 1
        entry["created"] = min(entry["created"], created)
    return sorted(found.values(), key=lambda e: (-e["priority"], e["created"], e["gang"]))


def _timestamp(text) -> float:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _pending_gang(state: ServiceState, gang: str):
    """The gang's tree, each role shaped as its pending pods were admitted (GPU tolerations, default
    requests: extender.admitted), or None."""
    namespace, _, name = gang.partition("/")
    tree, roles = None, set()
    for pod in state.objects.list("Pod"):
        metadata = pod.get("metadata") or {}
        if (metadata.get("namespace") or "default") != namespace or (pod.get("spec") or {}).get("nodeName"):
            continue
        try:
            ident = identify(state, pod)
        except ValueError:                       # GroupingError: its workload is invalid or not seen yet
            continue
        if ident is None or not (ident.gang == gang or (ident.tree.workload or "") in (name, gang)):
            continue
        if tree is None:
            tree = ident.tree
        if ident.tree.key == tree.key and ident.slot.role not in roles:
            roles.add(ident.slot.role)
            tree = admitted_tree(tree, None, ident.slot.role, pod)
    return tree


def closest(state: ServiceState, plan, top: int = 3, index=None) -> list[dict]:
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
    for gang in running_gangs(state, index):
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
