"""The joint demand of a subtree: all its roles and segments together must fit in one domain. Per-role
counts alone let a domain through that holds the master or the workers but not both; these bounds are
necessary conditions (never rule out a domain that could hold the subtree), cheap and vectorized."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .demand import GroupInfo
from .layout import ROOT
from .state import FIT_CAP, State


def joint_fit(state: State, group: GroupInfo, level: int, domains: np.ndarray) -> np.ndarray:
    """Which domains could hold the subtree's mandatory pods of every role at once (see `fits`)."""
    needs = {role: group.need.get(role, 0) for role in sorted(group.roles & set(state.roles))}
    return fits(state, needs, max(sum(needs.values()), group.need_total), group.waiting, level, domains)


@dataclass
class Rest:
    """What the children still to place ask for, smallest first (prefix sums: any number of them)."""

    needs: dict[str, np.ndarray]        # role -> 0, then the sums of the 1, 2, ... smallest needs
    totals: np.ndarray                  # the same for their mandatory pods of all roles
    running: int                        # their running pods that count once they are satisfied
    waiting: dict[str, int]             # their pods still to place, and the group's elastic pods


def summarize_rests(group: GroupInfo, order: list[GroupInfo]) -> list[Rest]:
    """The summary of order[position:] for every position, in one pass from the end."""
    def prefix(values: list[int]) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(sorted(values))]).astype(np.int64)

    waiting: dict[str, int] = {}
    for leaf in group.walk():
        for role, ids in leaf.optional if leaf.is_leaf else ():
            waiting[role] = waiting.get(role, 0) + ids.size    # an upper bound: some may be placed
    roles = sorted({role for child in order for role in child.need})
    needs: dict[str, list[int]] = {role: [] for role in roles}
    totals: list[int] = []
    running = 0
    rests = [Rest({role: prefix([]) for role in roles}, prefix([]), 0, dict(waiting))]
    for child in reversed(order):
        for role in roles:
            needs[role].append(child.need.get(role, 0))
        totals.append(child.need_total)
        running += sum(leaf.bound for leaf in child.walk() if leaf.is_leaf) - (child.done or 0)
        for role, count in child.waiting.items():
            waiting[role] = waiting.get(role, 0) + count
        rests.append(Rest({role: prefix(values) for role, values in needs.items()}, prefix(totals), running,
                          dict(waiting)))
    rests.reverse()
    return rests


def rest_fits(state: State, group: GroupInfo, rest: Rest, satisfied: int, counted, level: int,
              domain: int) -> bool:
    """Whether the group's domain could still hold what the group lacks once some children are placed:
    the k still to satisfy among the `rest` of its children (the smallest of them), and the pods its
    minMember still asks for, from those children or from the elastic pods of its placed leaves.
    `counted()`: the pods that already count toward the minMember (asked only when there is one)."""
    missing = min(max(0, group.k - satisfied), len(rest.totals) - 1)
    needs = {role: int(sums[missing]) for role, sums in rest.needs.items()}
    pods = int(rest.totals[missing])
    if group.min_pods:
        # running pods of the rest count once their child is satisfied, and need no room (`counted`
        # already holds those of children satisfied by running pods alone)
        pods = max(pods, group.min_pods - counted() - rest.running)
    if pods <= 0:
        return True
    for role in sorted(set(rest.waiting) & set(state.roles)):
        needs.setdefault(role, 0)
    return bool(fits(state, needs, pods, rest.waiting, level, np.array([domain]))[0])


def fits(state: State, needs: dict[str, int], pods: int, waiting: dict[str, int], level: int,
         domains: np.ndarray) -> np.ndarray:
    """Which domains pass four necessary conditions for `needs` (role -> pods) and `pods` pods of
    those roles in all, with at most `waiting` pods of each role:
    - each role's own count;
    - pods: each role's count, but no more than its waiting pods, summed over the roles;
    - pods: on each node, at most as many pods as the smallest request of the roles fits in every
      resource all of them ask for (and no more than all roles' own counts together);
    - resources: the free resources of the nodes some role may use cover the summed requests."""
    roles = list(needs)
    keep = np.ones(len(domains), dtype=bool)
    if not roles:
        return keep if pods <= 0 else ~keep
    for role, need in needs.items():
        if need:
            keep &= state.count(role, level, domains) >= need
    if sum(1 for need in needs.values() if need) < 2 and pods <= max(needs.values()):
        return keep                                     # one role: its own count is the joint demand
    capped = sum((np.minimum(state.count(role, level, domains), waiting.get(role, 0)) for role in roles),
                 np.zeros(len(domains), dtype=np.int64))
    keep &= capped >= pods
    bound, rooms = _per_domain(state, tuple(roles), level)
    keep &= bound[domains] >= pods
    demand = sum(need * state.request[role] for role, need in needs.items() if need)
    if np.ndim(demand):
        for column in np.flatnonzero(demand > 0):
            keep &= rooms[column][domains] >= demand[column]
    return keep


def _per_domain(state: State, roles: tuple[str, ...], level: int) -> tuple[np.ndarray, np.ndarray]:
    """Per domain of `level`: pods of the roles together that fit (see `_pod_bound`) and, per resource,
    the free amount on nodes some role may use. Kept in the state's memo until a count changes (the
    ladder asks the same of every level, and siblings of the same roles ask it again)."""
    key = ("joint", roles, level)
    found = state.memo.get(key)
    if found is None:
        requests = np.stack([state.request[role] for role in roles])
        fit = np.stack([state.fit[role] for role in roles])
        usable = fit.max(axis=0) > 0
        rooms = np.where(usable[:, None], np.maximum(state.free, 0), 0)
        found = (_domain_sum(state, _pod_bound(state.free, requests, fit, _together(state, roles, fit)), level),
                 _domain_sum(state, rooms, level).T)
        state.memo[key] = found
    return found


def _together(state: State, roles: tuple[str, ...], fit: np.ndarray) -> np.ndarray:
    """Pods of the roles each node could take, their own fits summed; roles held to a few pods per node
    share one count there (State.limited), so together they take no more than the largest limit allows."""
    limited = [i for i, role in enumerate(roles) if role in state.per_node]
    if len(limited) < 2:
        return fit.sum(axis=0)
    most = max(state.per_node[roles[i]] for i in limited)
    shared = np.minimum(fit[limited].sum(axis=0), np.maximum(most - state.limited, 0))
    return fit.sum(axis=0) - fit[limited].sum(axis=0) + shared


def _pod_bound(free: np.ndarray, requests: np.ndarray, fits: np.ndarray, together: np.ndarray) -> np.ndarray:
    """Pods of the roles together that could share each node (`together`: their fits, summed as
    `_together` does)."""
    bound = together
    shared = np.flatnonzero((requests > 0).all(axis=0))
    if shared.size:
        smallest = requests[:, shared].min(axis=0)
        by_resource = (np.maximum(free[:, shared], 0) // smallest).min(axis=1)
        bound = np.minimum(bound, np.where(fits.max(axis=0) > 0, by_resource, 0))
    return np.minimum(bound, FIT_CAP)


def _domain_sum(state: State, per_node: np.ndarray, level: int) -> np.ndarray:
    """Sums of `per_node` (nodes, or nodes x columns) over every domain of `level` (topology nodes only)."""
    layout = state.layout
    if level == ROOT:
        return per_node[layout.member].sum(axis=0, keepdims=True).astype(np.int64)
    if level == layout.depth:
        return per_node.astype(np.int64)
    owners = layout.node_domain[level][layout.member]
    inside = per_node[layout.member]
    size = layout.size(level)
    if inside.ndim == 1:
        return np.bincount(owners, weights=inside, minlength=size).astype(np.int64)
    return np.stack([np.bincount(owners, weights=inside[:, c], minlength=size) for c in range(inside.shape[1])],
                    axis=1).astype(np.int64)
