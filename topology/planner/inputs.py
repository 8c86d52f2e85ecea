"""The one entry point from a Cluster: per-role requests and usable nodes, why nodes are excluded,
which domains other gangs occupy, and a private free matrix -> PlanInput (and plan_for = build + plan)."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..cluster import Cluster
from ..dra_requests import RESERVED_FOR_MAX
from ..groups import GroupTree, Slot
from ..nodes import PodPlacementRules
from ..plan import Plan, PlanInput
from ..tree import TopologyTree
from .gang import plan_gang
from .policies import policy_named


def build_plan_input(cluster: Cluster, tree: GroupTree, *, strategy: str = "binpack",
                     bound: Mapping[Slot, int] | None = None,
                     candidates: Mapping[str, np.ndarray] | None = None,
                     occupied_nodes: np.ndarray | None = None,
                     free: np.ndarray | None = None, per_node: Mapping[str, int] | None = None,
                     restricted: Mapping[str, tuple[np.ndarray, str]] | None = None,
                     one_per_domain: Mapping[str, str] | None = None, explain: bool = True) -> PlanInput:
    """Everything the planner needs about one gang on this cluster. ValueError (naming the field and the
    valid values) for an unknown strategy or topology; a role nobody can host is marked unplaceable.
    `restricted`: per role, the nodes some other rule allows (pod affinity) and the reason for the rest;
    `one_per_domain`: role -> a level (label, alias or name) on which the role's pods repel each other."""
    policy_named(strategy)                  # ValueError naming the registered policies
    try:
        topology = cluster.topology(tree.topology) if tree.topology else None
    except KeyError as err:
        raise ValueError(f"gang {tree.key}: {err.args[0]}") from None
    node_count = len(cluster.nodes)
    requests: dict[str, np.ndarray] = {}
    usable: dict[str, np.ndarray] = {}
    unplaceable: dict[str, str] = {}
    excluded: dict[str, int] = {}
    possible: dict[str, np.ndarray] = {}
    for role in _roles(tree):
        spec = tree.pod_spec(role)
        amounts = cluster.pod_demand(spec, tree.namespace)
        requests[role] = cluster.resources.vector(amounts)
        missing = cluster.resources.unknown(amounts)
        rules = PodPlacementRules.from_spec(spec)
        mask = possible[role] = cluster.usable(rules)
        if candidates is not None and role in candidates:
            allowed = np.asarray(candidates[role], dtype=bool)
            _count(excluded, "not a candidate", int((mask & ~allowed).sum()))
            mask = mask & allowed
        claimed = cluster.claim_nodes(spec, tree.namespace)
        if claimed is not None:
            _count(excluded, "not where its claim is allocated", int((mask & ~claimed).sum()))
            mask = mask & claimed
        if restricted is not None and role in restricted:
            allowed, reason = restricted[role]
            _count(excluded, reason, int((mask & ~allowed).sum()))
            mask = mask & allowed
        problems = cluster.claim_problems(spec, tree.namespace)
        if problems:
            unplaceable[role] = "; ".join(problems)
            mask = possible[role] = np.zeros(node_count, dtype=bool)
        elif missing:
            unplaceable[role] = f"requests {', '.join(missing)}, which no node offers"
            mask = possible[role] = np.zeros(node_count, dtype=bool)
        usable[role] = mask
        for reason, count in _exclusions(cluster, rules, usable[role] if role not in unplaceable else cluster.usable(rules)).items():
            excluded[reason] = max(excluded.get(reason, 0), count)
    pods = {}
    for slot in tree.slots():
        pods[slot.role] = pods.get(slot.role, 0) + 1
    shared = cluster.shared_claims(tree.namespace, {role: (tree.pod_spec(role), pods.get(role, 0)) for role in requests})
    for claim in shared:
        if claim.pods > RESERVED_FOR_MAX and not claim.podgroup:
            for role in claim.roles:
                unplaceable.setdefault(role, f"{claim.where} is named by {claim.pods} pods, more than the "
                                             f"{RESERVED_FOR_MAX} one claim can be reserved for")
                usable[role] = possible[role] = np.zeros(node_count, dtype=bool)
    if topology is not None:
        for reason, count in _tree_exclusions(topology).items():
            _count(excluded, reason, count)
    return PlanInput(
        tree=tree, topology=topology,
        free=cluster.capacity.snapshot() if free is None else np.array(free, dtype=np.int64, copy=True),
        resources=cluster.resources, node_names=list(cluster.node_names),
        requests=requests, usable=usable, bound=dict(bound or {}), strategy=strategy,
        occupied=occupied_masks(topology, occupied_nodes), excluded=excluded, unplaceable=unplaceable,
        allocatable=cluster.capacity.allocatable, possible=possible, per_node=dict(per_node or {}),
        links=cluster.links, shared=shared,
        one_per_domain={role: topology.level_index(level) for role, level in (one_per_domain or {}).items()
                        if topology is not None},
        explain=explain)


def plan_for(cluster: Cluster, tree: GroupTree, **kwargs) -> Plan:
    """build_plan_input + plan_gang."""
    return plan_gang(build_plan_input(cluster, tree, **kwargs))


def occupied_masks(topology: TopologyTree | None, occupied_nodes: np.ndarray | None) -> list[np.ndarray] | None:
    """Per level, the domains holding any node of `occupied_nodes` (nodes running other gangs' pods)."""
    if topology is None or occupied_nodes is None:
        return None
    nodes = np.asarray(occupied_nodes, dtype=bool) & topology.member
    masks = []
    for level in range(topology.depth):
        mask = np.zeros(topology.domain_count(level), dtype=bool)
        mask[topology.node_domain[level][nodes]] = True
        masks.append(mask)
    return masks


def _roles(tree: GroupTree) -> list[str]:
    roles = list(tree.roles)
    for slot in tree.slots():
        if slot.role not in roles:
            roles.append(slot.role)
    return roles


def _exclusions(cluster: Cluster, rules: PodPlacementRules, mask: np.ndarray) -> dict[str, int]:
    """Why nodes outside the usable mask are excluded; only those nodes are examined."""
    counts: dict[str, int] = {}
    for node in np.flatnonzero(~mask).tolist():
        reason = rules.allows(cluster.nodes[node])
        if reason:
            _count(counts, "tainted" if reason.startswith("untolerated taint") else reason, 1)
    return counts


def _tree_exclusions(topology: TopologyTree) -> dict[str, int]:
    counts: dict[str, int] = {}
    for reason in topology.excluded.values():
        _count(counts, "missing level label" if reason.startswith("missing level label") else reason, 1)
    return counts


def _count(counts: dict[str, int], reason: str, count: int) -> None:
    if count:
        counts[reason] = counts.get(reason, 0) + count
