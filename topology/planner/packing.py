"""Packing one small domain exactly (issue 15 item 2).

Pods are placed leaf by leaf in tree order, each leaf's on the tightest nodes that hold them. With pods
of different sizes sharing nodes that order can keep fewer pods in a domain than it holds: one 8-GPU
pod where two 4-GPU pods fit, or a sibling's small pods on the one node a larger pod needed. For a
small domain (a rack of a few nodes), `most_pods` finds how many pods of each role every node takes
so that every mandatory pod fits and the most pods in all do (a depth-first search over the nodes,
memoized on the pods placed so far, with a budget). It is used three ways:
- `repack`: when a leaf's elastic pods are left out of their own domain, the pods of the leaves at home
  there (mandatory and elastic, placed or waiting) are placed again; other pods stay where they are;
- siblings.py values a few leaves' allotments to small domains by it;
- `fill_packed`: in the domain such an allotment gave it, a leaf's mandatory pods go where the packing
  of the whole domain puts them, leaving room for its siblings' pods and its own elastic pods."""
from __future__ import annotations

import numpy as np

from .demand import GroupInfo
from .state import State

NODES = 8                    # nodes in a domain packed exactly, at most
ROLES = 3                    # roles packed together, at most
STEPS = 20_000               # node options the search looks at, at most; beyond it the greedy fill stays


def repack(state: State, leaves: list[GroupInfo], level: int, domain: int) -> int:
    """Place the pods of `leaves` (all at home in the domain, none running) again inside it when an
    exact packing holds more of them; the pods gained (0: nothing changed)."""
    nodes = state.layout.inside(level, domain, state.layout.depth)
    if nodes.size > NODES:
        return 0
    pods = _pods_by_role(state, leaves, nodes)
    roles = sorted(pods or ())
    if not pods or not packable(state, nodes, roles):
        return 0
    before = sum(int(np.count_nonzero(state.node_of[ids] >= 0)) for ids, _ in pods.values())
    mark = state.mark()
    for role in roles:
        placed = pods[role][0][state.node_of[pods[role][0]] >= 0]
        if placed.size:
            state.unplace(role, placed)
    try:
        found = most_inside(state, nodes, roles, [pods[role][1] for role in roles],
                            [pods[role][0].size for role in roles])
    except TooLarge:
        found = None
    if found is None or sum(map(sum, found)) <= before:
        state.revert(mark)
        return 0
    for column, role in enumerate(roles):
        per_node = np.array([row[column] for row in found], dtype=np.int64)
        ids = np.sort(pods[role][0][:int(per_node.sum())])
        taken = per_node > 0
        if taken.any():
            state.place(role, nodes[taken], per_node[taken], ids)
    return sum(map(sum, found)) - before


def fill_packed(state: State, leaf: GroupInfo, level: int, domain: int, siblings: list[GroupInfo]) -> bool:
    """Place the leaf's mandatory pods on the nodes an exact packing of the domain gives their roles,
    the packing holding the mandatory pods still to place of the siblings allotted there (the leaf
    among them) and the most of their pods still to place. False, nothing placed, when that does not
    fit or is beyond the search."""
    nodes = state.layout.inside(level, domain, state.layout.depth)
    least: dict[str, int] = {}
    most: dict[str, int] = {}
    for sibling in siblings:
        for pods, counts in ((sibling.mandatory, (least, most)), (sibling.optional, (most,))):
            for role, ids in pods:
                for count in counts:
                    count[role] = count.get(role, 0) + int(np.count_nonzero(state.node_of[ids] < 0))
    roles = sorted(most)
    if not packable(state, nodes, roles):
        return False
    try:
        found = most_inside(state, nodes, roles, [least.get(role, 0) for role in roles],
                            [most[role] for role in roles])
    except TooLarge:
        return False
    if found is None:
        return False
    for role, ids in leaf.mandatory:
        per_node = np.array([row[roles.index(role)] for row in found], dtype=np.int64)
        before = np.cumsum(per_node) - per_node
        take = np.clip(ids.size - before, 0, per_node)        # the first pods of the role, in node order
        state.place(role, nodes[take > 0], take[take > 0], ids)
    return True


def packable(state: State, nodes: np.ndarray, roles: list[str]) -> bool:
    """Whether the search may pack these roles on these nodes: few of each, no role kept apart, and linked
    columns (a DRA class and its extended resource) linked on all of the nodes or on none."""
    return nodes.size <= NODES and len(roles) <= ROLES \
        and not any(role in state.per_node or role in state.apart for role in roles) \
        and (not any(role in state.linked for role in roles)
             or all(mask[nodes].all() or not mask[nodes].any() for _, _, mask in state.links.pairs))


def _used_rows(state: State, nodes: np.ndarray, roles: list[str]) -> list[np.ndarray]:
    """Each role's row as a pod uses it on these nodes (`packable`: links alike on all of them)."""
    return [state.links.apply(nodes[:1], state.request[role]) if role in state.linked else state.request[role]
            for role in roles]


def most_inside(state: State, nodes: np.ndarray, roles: list[str], least: list[int],
                most: list[int]) -> list[list[int]] | None:
    """`most_pods` on the nodes as the state sees them (roles in `roles` order)."""
    rows = _used_rows(state, nodes, roles)
    columns = np.unique(np.concatenate([np.flatnonzero(row > 0) for row in rows]))
    return most_pods([tuple(row) for row in state.free[nodes][:, columns].tolist()],
                     [tuple(row[columns].tolist()) for row in rows],
                     [[int(state.fit[role][node]) for role in roles] for node in nodes.tolist()], least, most)


def _pods_by_role(state: State, leaves: list[GroupInfo],
                  nodes: np.ndarray) -> dict[str, tuple[np.ndarray, int]] | None:
    """Role -> (the leaves' slot ids to pack: mandatory ones first, then elastic ones placed inside the
    domain or waiting; how many are mandatory). None when a mandatory pod lies outside the domain."""
    inside = np.zeros(state.layout.node_count + 1, dtype=bool)
    inside[nodes] = True                       # index -1 (waiting) stays False at the end
    mandatory: dict[str, list[np.ndarray]] = {}
    elastic: dict[str, list[np.ndarray]] = {}
    for leaf in leaves:
        for role, ids in leaf.mandatory:
            if not inside[state.node_of[ids]].all():
                return None
            mandatory.setdefault(role, []).append(ids)
        for role, ids in leaf.optional:
            where = state.node_of[ids]
            elastic.setdefault(role, []).append(ids[(where < 0) | inside[where]])
    pods = {}
    for role in sorted(set(mandatory) | set(elastic)):
        must = np.concatenate(mandatory.get(role, [np.empty(0, dtype=np.int64)]))
        may = np.concatenate(elastic.get(role, [np.empty(0, dtype=np.int64)]))
        pods[role] = (np.concatenate([must, may]).astype(np.int64), int(must.size))
    return pods


def most_pods(free: list[tuple[int, ...]], requests: list[tuple[int, ...]], fit: list[list[int]],
              least: list[int], most: list[int]) -> list[list[int]] | None:
    """Pods of each role per node (one row per node): at least `least` and at most `most` of each role
    in all, no node beyond its `free` resources (`fit`: the most of each role alone on the node), the
    most pods in all; the first such packing in the search order (earlier nodes fuller). None when
    the least counts do not fit; TooLarge when the search exceeds its budget."""
    roles = len(requests)
    memo: dict[tuple, tuple[int, tuple | None]] = {}
    steps = 0

    def options(node: int, placed: tuple) -> list[tuple[int, ...]]:
        """Counts per role the node can take together, fuller first."""
        found: list[tuple[int, ...]] = []

        def extend(role: int, counts: tuple, left: tuple) -> None:
            if role == roles:
                found.append(counts)
                return
            top = min(fit[node][role], most[role] - placed[role])
            for count in range(top, -1, -1):
                after = tuple(a - count * r for a, r in zip(left, requests[role]))
                if min(after, default=0) >= 0:
                    extend(role + 1, counts + (count,), after)

        extend(0, (), free[node])
        return found

    def best(node: int, placed: tuple) -> int:
        """The most pods in all reachable from `placed` on nodes node.., -1 when the least do not fit."""
        nonlocal steps
        if node == len(free):
            return sum(placed) if all(p >= low for p, low in zip(placed, least)) else -1
        key = (node, placed)
        if key in memo:
            return memo[key][0]
        top, choice = -1, None
        for counts in options(node, placed):
            steps += 1
            if steps > STEPS:
                raise TooLarge
            total = best(node + 1, tuple(p + c for p, c in zip(placed, counts)))
            if total > top:
                top, choice = total, counts
        memo[key] = (top, choice)
        return top

    if best(0, (0,) * roles) < 0:
        return None
    rows, placed = [], (0,) * roles
    for node in range(len(free)):
        counts = memo[(node, placed)][1]
        rows.append(list(counts))
        placed = tuple(p + c for p, c in zip(placed, counts))
    return rows


class TooLarge(Exception):
    """The search looked at more node options than STEPS."""
