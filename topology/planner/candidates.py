"""Candidate domains for a group at one level inside its parent's domain: those that can hold its
mandatory pods (vectorized counts), whole segments, its running pods and its exclusivity (`fitting`),
in the order the placement policy tries them (`PlacementPolicy.order`, see policies/)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .demand import GroupInfo
from .joint import fits, joint_fit
from .layout import ROOT, Layout
from .segments import holds_segments, segment_room, units_needed
from .state import State
from .together import shared_levels

if TYPE_CHECKING:
    from .policies import PlacementPolicy


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
               occupied: list[np.ndarray] | None, policy: PlacementPolicy, near: int | None = None,
               target: tuple[int, int] | None = None, siblings: np.ndarray | None = None) -> np.ndarray:
    """Every domain that could hold the subtree (`fitting`), in the order the policy tries them."""
    fit = fitting(state, group, level, scope_level, scope_domain, occupied, near, target, siblings)
    if fit.domains.size <= 1:
        return fit.domains
    return fit.domains[policy.order(fit)]


@dataclass(slots=True)                           # built per candidates() call: 8x cheaper than a frozen one
class Fit:
    """The domains of one level that could hold a group (the filtering half of candidates()), and what
    ordering them needs: the group's primary role (the one with the most mandatory pods; None when
    nothing is mandatory) and its need, segment room, the segment's allotted `target`, a node of the
    previous sibling (`near`) and the nodes of the siblings placed so far."""
    state: State
    group: GroupInfo
    level: int
    domains: np.ndarray
    primary: str | None = None
    primary_need: int = -1
    segments_held: np.ndarray | None = None      # per domain: holds all the group's segments (None: no shape)
    target: tuple[int, int] | None = None
    near: int | None = None
    siblings: np.ndarray | None = None

    def room(self, level: int | None = None) -> np.ndarray:
        """Per domain, the primary role's pods that fit in it (or in its ancestor of a coarser `level`)."""
        state, at = self.state, self.level
        if level is None or level == at:
            return state.count(self.primary, at, self.domains)
        return state.count(self.primary, level, state.layout.ancestors(at, level)[self.domains])

    def keys(self, tightness: Callable[[np.ndarray], np.ndarray],
             preferred: np.ndarray | None = None) -> list[np.ndarray]:
        """np.lexsort keys, the last the most significant: inside the allotted target, then holding whole
        segments (soft shapes), then `preferred` (0 first: the policy's own preference), then the fewest
        new domains for the gang beside its placed siblings (together.py), then the fewest domains below
        for its segments (coarsest level first), then the leftover room as the policy's `tightness` ranks
        it (lower first), then the parent's, grandparent's, ... room the same way (so small gangs fill up
        partly used racks and blocks under binpack), then nearest to `near` (rank order), then tree order.
        Without mandatory pods: the most room for the group's elastic pods, whatever the policy."""
        state, group, level, domains = self.state, self.group, self.level, self.domains
        layout = state.layout
        keys = [domains]
        if self.primary is None:
            roles = group.roles & set(state.roles)
            keys.append(-sum((state.count(role, level, domains) for role in sorted(roles)), np.zeros(len(domains))))
        else:
            if self.near is not None and level >= 0:
                keys.append(-shared_levels(layout, level, domains, np.array([self.near])))
            keys.extend(tightness(self.room(above)) for above in range(max(level, 0)))
            keys.append(tightness(self.room() - self.primary_need))
        if self.segments_held is not None:
            keys.extend(reversed(segment_domains_needed(state, group.segments, level, domains)))
        if self.siblings is not None and level >= 0 and self.primary is not None:
            keys.append(-shared_levels(layout, level, domains, self.siblings))
        if preferred is not None and self.primary is not None:
            keys.append(preferred)
        if self.segments_held is not None and not group.segments.hard:
            keys.append((~self.segments_held).astype(np.int64))
        if self.target is not None:
            keys.append((~on_target(layout, level, domains, self.target)).astype(np.int64))
        return keys


def fitting(state: State, group: GroupInfo, level: int, scope_level: int, scope_domain: int,
            occupied: list[np.ndarray] | None, near: int | None = None, target: tuple[int, int] | None = None,
            siblings: np.ndarray | None = None) -> Fit:
    """The domains of `level` inside (scope_level, scope_domain) that could hold the subtree (see
    joint.py): its mandatory pods by vectorized counts, whole segments, its running pods' domain, its
    exclusivity, and (for a segment) its allotted `target`: at levels finer than the target only domains
    inside it. In tree order; any order of them gives a valid plan, the policy picks which."""
    layout = state.layout
    if any(need and state.most(role, level) < need for role, need in group.need.items()):
        return Fit(state, group, level, NO_DOMAINS)     # no domain of the level holds a role's pods
    domains = in_scope(layout, level, scope_level, scope_domain)
    pinned = pinned_domain(layout, group, level)
    if pinned is not None:
        domains = domains[domains == pinned]
    if not domains.size:
        return Fit(state, group, level, domains)
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
        return Fit(state, group, level, domains[keep])
    held = group_segment_room(state, group, level, domains)
    if held is not None and group.segments.hard:
        keep &= held[1]
    keep &= segments_below_fit(state, group, level, domains)
    keep &= joint_fit(state, group, level, domains)
    if group.claim is not None and level >= group.claim and occupied is not None and not group.pinned.size:
        keep &= ~occupied[group.claim][layout.ancestors(level, group.claim)[domains]]
    if target is not None and level > target[0]:
        # finer than its allotted domain, a segment stays inside it (at the allotted level it may leave)
        keep &= on_target(layout, level, domains, target)
    return Fit(state, group, level, domains[keep], primary, primary_need,
               None if held is None else held[1][keep], target, near, siblings)


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
