"""Preempt: of the victims kube-scheduler proposes (node -> pod UIDs), keep only those that help the
pod's gang. A gang that app.scheduling.preemptor is preempting for keeps exactly the victims chosen for it; a gang
pod with a plan keeps its planned node; a gang without a plan keeps what app.scheduling.preemptor offers, or,
without that module, the nodes a plan made with every proposed victim gone would use. Plain pods keep
everything. `--preemption off` offers no victims for gang pods; `dry-run` logs and offers none."""
from __future__ import annotations

from collections.abc import Mapping

from topology.cluster import pod_key
from topology.groups import GroupTree
from topology.resources import pod_requests

from ..logs import fields, get_logger
from ..state import ServiceState
from . import planning

log = get_logger(__name__)


def keep_helpful_victims(state: ServiceState, pod: Mapping, victims: Mapping[str, list[str]],
                         preemptor=None) -> dict[str, list[str]]:
    """`preemptor` (app.scheduling.preemptor) decides for a gang it is preempting for, and for a gang without a
    plan (it offers only victims it chose itself).

    From v1.38 kube-scheduler also offers candidates with no victim (kubernetes#135486): nodes its own plugins
    fit the pod on as they are, so nodes our filter refused. Evicting nothing changes no refusal, and a
    nomination there would hold the node (often one reserved for a gang) for a pod refused on it again: such
    a candidate is kept only on the pod's own planned node, where the pod passes once its gang is whole."""
    kept = _helpful(state, pod, victims, preemptor)
    planned = _planned_node(state, pod)
    return {node: uids for node, uids in kept.items() if uids or node == planned}


def _planned_node(state: ServiceState, pod: Mapping) -> str | None:
    with state.lock:
        try:
            ident = planning.identify(state, pod)
        except planning.GroupingError:
            return None
        plan = state.plans.get(ident.gang) if ident is not None else None
        slot_state = plan.slot_for(pod_key(pod), ident.slot) if plan is not None else None
        return slot_state.node if slot_state is not None else None


def _helpful(state: ServiceState, pod: Mapping, victims: Mapping[str, list[str]], preemptor) -> dict[str, list[str]]:
    mode = state.settings.preemption
    with state.lock:
        try:
            ident = planning.identify(state, pod)
        except planning.GroupingError:
            return {}
        if ident is None:
            return dict(victims)
        if mode == "off":
            return {}
        plan = state.plans.get(ident.gang)
        slot_state = plan.slot_for(pod_key(pod), ident.slot) if plan is not None else None
        if preemptor is not None and ident.gang in preemptor.active:
            return _on_own_node(preemptor.victims_for(ident.tree, pod, victims), slot_state)
        if slot_state is not None and slot_state.node:
            kept = {n: v for n, v in victims.items() if n == slot_state.node}
        elif preemptor is not None:
            return preemptor.victims_for(ident.tree, pod, victims)
        else:
            kept = _victims_that_fit(state, ident.tree, victims)
        if mode == "dry-run":
            log.info("preemption dry-run", extra=fields(pod=pod_key(pod), gang=ident.gang,
                                                      would_evict={n: len(v) for n, v in kept.items()}))
            return {}
        return kept


def _on_own_node(victims: dict[str, list[str]], slot_state) -> dict[str, list[str]]:
    """Only the victims on the node planned for this pod's slot. kube-scheduler nominates the pod to the
    node it picks among those offered, and a nominated pod holds that node against pods of equal priority:
    two pods of one gang each nominated to the other's planned node would block each other."""
    if slot_state is None or not slot_state.node:
        return victims
    return {node: uids for node, uids in victims.items() if node == slot_state.node}


def _victims_that_fit(state: ServiceState, tree: GroupTree, victims: Mapping[str, list[str]]) -> dict[str, list[str]]:
    cluster = state.cluster
    free = cluster.free.copy()
    by_uid = {(p.get("metadata") or {}).get("uid"): p for p in state.objects.list("Pod")}
    going = {pod_key(by_uid[uid]) for uids in victims.values() for uid in uids if uid in by_uid}
    for node, uids in victims.items():
        index = cluster.node_index.get(node)
        if index is None:
            continue
        for uid in uids:
            victim = by_uid.get(uid)
            if victim is None:
                continue
            key = pod_key(victim)
            usage = cluster.pods.get(key)
            if usage is not None and usage.node == index:
                free[index] += cluster.eviction_usage(key, going)
            else:
                free[index] += cluster.resources.vector(pod_requests(victim.get("spec") or {}))
    bound = {slot: node for slot, (_, node) in state.bound.get(tree.key, {}).items()}
    result = planning.plan(state, tree, bound=bound, free=free)
    if not result.placed:
        return {}
    used = {cluster.node_names[i] for i in result.slots.values()}
    return {n: v for n, v in victims.items() if n in used}
