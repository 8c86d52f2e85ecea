"""The joint demand of a subtree: all its roles and segments together must fit in one domain. Per-role
counts alone let a domain through that holds the master or the workers but not both; these bounds are
necessary conditions (never rule out a domain that could hold the subtree), cheap and vectorized."""
from __future__ import annotations

import numpy as np

from .demand import GroupInfo
from .layout import ROOT
from .state import FIT_CAP, State


def joint_fit(state: State, group: GroupInfo, level: int, domains: np.ndarray) -> np.ndarray:
    """Which domains pass both bounds for the subtree's mandatory pods of every role:
    - pods: on each node, at most as many pods as the smallest request of the roles fits in every
      resource all of them ask for (and no more than all roles' own counts together);
    - resources: the free resources of the nodes some role may use cover the summed requests."""
    roles = [role for role in sorted(group.roles & set(state.roles))]
    needs = {role: group.need.get(role, 0) for role in roles}
    pods = max(sum(needs.values()), group.need_total)
    if sum(1 for need in needs.values() if need) < 2 and pods <= max(needs.values(), default=0):
        return np.ones(len(domains), dtype=bool)        # one role: its own count is the joint demand
    requests = np.stack([state.request[role] for role in roles])
    fits = np.stack([state.fit[role] for role in roles])
    usable = fits.max(axis=0) > 0
    keep = _domain_sum(state, _pod_bound(state.free, requests, fits), level, domains) >= pods
    demand = sum(need * state.request[role] for role, need in needs.items() if need)
    if np.ndim(demand):
        for column in np.flatnonzero(demand > 0):
            room = np.where(usable, np.maximum(state.free[:, column], 0), 0)
            keep &= _domain_sum(state, room, level, domains) >= demand[column]
    return keep


def _pod_bound(free: np.ndarray, requests: np.ndarray, fits: np.ndarray) -> np.ndarray:
    """Pods of the roles together that could share each node."""
    bound = fits.sum(axis=0)
    shared = np.flatnonzero((requests > 0).all(axis=0))
    if shared.size:
        smallest = requests[:, shared].min(axis=0)
        by_resource = (np.maximum(free[:, shared], 0) // smallest).min(axis=1)
        bound = np.minimum(bound, np.where(fits.max(axis=0) > 0, by_resource, 0))
    return np.minimum(bound, FIT_CAP)


def _domain_sum(state: State, per_node: np.ndarray, level: int, domains: np.ndarray) -> np.ndarray:
    layout = state.layout
    if level == ROOT:
        return np.full(len(domains), int(per_node[layout.member].sum()), dtype=np.int64)
    if level == layout.depth:
        return per_node[domains]
    owners = layout.node_domain[level]
    return np.bincount(owners[layout.member], weights=per_node[layout.member],
                       minlength=layout.size(level)).astype(np.int64)[domains]
