"""Candidate domains for a group at one level inside its parent's domain: those that can hold its
mandatory pods (vectorized counts), whole segments, its running pods and its exclusivity, best first."""
from __future__ import annotations

import numpy as np

from .demand import GroupInfo
from .holes import fewest_holes_first
from .joint import fits, joint_fit
from .layout import ROOT, Layout
from .segments import holds_segments, segment_room, units_needed
from .state import State
from .together import shared_levels


NO_DOMAINS = np.empty(0, dtype=np.int64)


def group_segment_room(state: State, group: GroupInfo, level: int,
                       domains: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(whole segments of the group's children that fit in each domain, whether each holds all of them);
    None: no segment shape below the level."""
    shape = group.segments
    if shape is None or shape.level <= level:
        return None
    layout = state.layout
    pods = state.counts[shape.role][shape.level]
    if level == ROOT:
        owner, size = np.zeros(len(pods), dtype=np.int64), 1
        domains = np.zeros(len(domains), dtype=np.int64)
    else:
        owner, size = layout.ancestors(shape.level, level), layout.size(level)
    room, spare = segment_room(shape, pods, owner, size)
    return room[domains], holds_segments(shape, room, spare)[domains]


def segments_below_fit(state: State, group: GroupInfo, level: int, domains: np.ndarray) -> np.ndarray:
    """Which domains could hold the required segments of every descendant the group must place: each
    segment lies in one domain of its level inside the group's domain (a necessary condition that
    spares the search trying every way to place the rest first)."""
    keep = np.ones(len(domains), dtype=bool)
    for below in group.segmented_below:
        held = group_segment_room(state, below, level, domains)
        if held is not None:
            keep &= held[1]
    return keep


def pinned_domain(layout: Layout, group: GroupInfo, level: int) -> int | None:
    """The one domain of `level` holding every running pod of the group; -1 when they span several.
    Running pods on nodes outside the topology pin nothing."""
    if not group.pinned.size:
        return None
    owners = layout.node_ancestor(group.pinned, level)
    owners = owners[owners >= 0]
    if not owners.size:
        return None
    return int(owners[0]) if (owners == owners[0]).all() else -1


def in_scope(layout: Layout, level: int, scope_level: int, scope_domain: int) -> np.ndarray:
    if level == scope_level:
        return np.array([scope_domain], dtype=np.int64)
    return layout.inside(scope_level, scope_domain, level)


def candidates(state: State, group: GroupInfo, level: int, scope_level: int, scope_domain: int,
               occupied: list[np.ndarray] | None, spread: bool, near: int | None = None,
               target: tuple[int, int] | None = None, siblings: np.ndarray | None = None) -> np.ndarray:
    """Every domain that could hold the subtree (see joint.py), best first: inside the finest domain
    already used by the placed `siblings` (their nodes; the fewest new domains for the gang, see
    together.py), then the tightest (binpack) or emptiest (spread) leftover, then the leftover of its
    parent, grandparent, ... the same way, then nearest to `near` (a node of the previous sibling: rank
    order), then (binpack) the fewest of the cluster's largest holes (holes.py), then tree order (domain
    names). A segment's `target` (the domain allotted to it with its
    siblings, see segments.py) comes before all of these; at finer levels only domains inside the
    target are candidates."""
    layout = state.layout
    if any(need and state.most(role, level) < need for role, need in group.need.items()):
        return NO_DOMAINS                # no domain of the level holds a role's pods (most of a ladder)
    domains = in_scope(layout, level, scope_level, scope_domain)
    pinned = pinned_domain(layout, group, level)
    if pinned is not None:
        domains = domains[domains == pinned]
    if not domains.size:
        return domains
    keep = np.ones(len(domains), dtype=bool)
    primary, primary_need = None, -1
    for role, need in group.need.items():
        if need:
            keep &= state.count(role, level, domains) >= need
            if need > primary_need:
                primary, primary_need = role, need
    if group.need_total > sum(group.need.values()):
        # an inner minMember asks for more pods than the children's minimums: any of its roles count
        total = sum((state.count(role, level, domains) for role in sorted(group.roles & set(state.roles))),
                    np.zeros(len(domains), dtype=np.int64))
        keep &= total >= group.need_total
    if not keep.any():                   # the counts alone rule every domain out (most levels of a ladder)
        return domains[keep]
    held = group_segment_room(state, group, level, domains)
    room = None if held is None else held[0]
    shape = group.segments
    if held is not None and shape.hard:
        keep &= held[1]
    keep &= segments_below_fit(state, group, level, domains)
    keep &= joint_fit(state, group, level, domains)
    if group.claim is not None and level >= group.claim and occupied is not None and not group.pinned.size:
        keep &= ~occupied[group.claim][layout.ancestors(level, group.claim)[domains]]
    if target is not None and level > target[0]:
        # finer than its allotted domain, a segment stays inside it (at the allotted level it may leave)
        keep &= on_target(layout, level, domains, target)
    domains = domains[keep]
    if domains.size <= 1:
        return domains
    if primary is None:
        # nothing mandatory: the domain with the most room for the group's elastic pods
        roles = group.roles & set(state.roles)
        leftover = -sum((state.count(role, level, domains) for role in sorted(roles)), np.zeros(len(domains)))
    else:
        leftover = state.count(primary, level, domains) - primary_need
        if spread:
            leftover = -leftover
    keys = [domains]
    if near is not None and level >= 0 and primary is not None:
        # rank order, last: of equal fits, the domain sharing the most ancestors with the last sibling
        keys.append(-shared_levels(layout, level, domains, np.array([near])))
    if primary is not None and level > 0:
        # equal fits: the domain inside the tightest (binpack) or emptiest (spread) parent, then
        # grandparent, ..., so small gangs fill up partly used racks and blocks and keep empty ones whole
        for above in range(level):
            room_above = state.count(primary, above, layout.ancestors(level, above)[domains])
            keys.append(-room_above if spread else room_above)
    keys.append(leftover)
    if room is not None:
        # segments: the domain that holds them in the fewest domains below it, the coarsest level first
        # (each level on its own), before a tighter one
        keys.extend(reversed(segment_domains_needed(state, shape, level, domains)))
    if siblings is not None and level >= 0 and primary is not None:
        # siblings stay together: fewer new domains for the gang, at every level, beats a tighter fit
        keys.append(-shared_levels(layout, level, domains, siblings))
    if primary is not None and not spread:
        # binpack: a domain that also holds the group's own elastic pods before a tighter one
        keys.append((~holds_elastic(state, group, level, domains)).astype(np.int64))
    if room is not None and not shape.hard:
        keys.append((~held[1][keep]).astype(np.int64))
    if target is not None:
        keys.append((~on_target(layout, level, domains, target)).astype(np.int64))
    order = np.lexsort(keys)
    if primary is not None and not spread and level >= 0:
        # equal on every key: the domain holding the fewest of the cluster's largest holes (holes.py)
        order = fewest_holes_first(state, primary, level, domains, keys, order)
    return domains[order]


def segment_domains_needed(state: State, shape, level: int, domains: np.ndarray) -> list[np.ndarray]:
    """Per domain, the fewest domains its segments need at each level below it, coarsest first (each
    level on its own: a lower bound, exact at the level just below)."""
    return [units_needed(state, shape, level, domains, shape.count, below)
            for below in range(level + 1, shape.level + 1)]


def on_target(layout: Layout, level: int, domains: np.ndarray, target: tuple[int, int]) -> np.ndarray:
    """Which domains lie inside the target domain, or contain it."""
    target_level, target_domain = target
    if level >= target_level:
        return layout.ancestors(level, target_level)[domains] == target_domain
    return domains == layout.ancestors(target_level, level)[target_domain]


def elastic_want(group: GroupInfo) -> dict[str, int]:
    """Pods per role the subtree places when every elastic pod fits: its minimums plus its elastic pods."""
    want = dict(group.need)
    for leaf in group.walk():
        for role, ids in leaf.optional:
            want[role] = want.get(role, 0) + len(ids)
    return want


def holds_elastic(state: State, group: GroupInfo, level: int, domains: np.ndarray) -> np.ndarray:
    """Which domains have room for every pod of the subtree, its elastic pods included (all roles at
    once, as far as joint.py can tell; alike roles, such as a master and its workers asking the same
    of the same nodes, are one role, counted at once)."""
    want: dict[str, int] = {}
    for role, pods in elastic_want(group).items():
        twin = state.twin.get(role, role)
        want[twin] = want.get(twin, 0) + pods
    return fits(state, want, sum(want.values()), want, level, domains)


def has_elastic(group: GroupInfo) -> bool:
    return any(ids.size for leaf in group.walk() for _, ids in leaf.optional)
