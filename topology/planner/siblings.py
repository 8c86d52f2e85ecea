"""Where siblings with elastic pods go, chosen for all of them together (issue 15 item 2; alike segments
are allotted by segments.py, see `_alike`).

Placed one after the other, each sibling takes the tightest domain of its level with room for all its
pods, but only its mandatory pods are placed before the next sibling chooses: that one then sees the
room the first one's elastic pods need and takes it (or, placed first, takes the one domain a larger
sibling fits in whole). So before a group places such children, it rehearses their allotment on the
counts, holding room in the state and undoing it at once:
1. a short depth-first search, the sibling with the most pods first, each in the tightest domain of its
   level that holds all its pods, else the one with room for the most of them, holding that room so
   the next sibling sees it (the first allotment found is this greedy one; then a few others);
2. each allotment found is replayed as the placer will place it (every sibling's mandatory pods in
   tree order, then each one's elastic pods inside its own domain) and the one keeping the most pods
   in their own sibling's domain wins, the first on ties;
3. when the siblings are a few leaves whose domains are small, every allotment of them to domains
   holding their minimums is valued by packing each domain exactly (packing.py), and one keeping more
   than step 2's wins: the placer then fills each domain as that packing does.
Each sibling then tries its allotted domain first, as a segment does; the search may still move it,
so completeness is unchanged."""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from .candidates import elastic_want, has_elastic, in_scope
from .demand import GroupInfo
from .fill import select
from .packing import TooLarge, most_inside, packable
from .policies import PlacementPolicy
from .state import NO_SLOTS, State

HOLDS = 24               # siblings' room held during the search, at most (after the first allotment)
ALLOTMENTS = 6           # allotments the search offers for replay, at most
REPLAYED = 36            # siblings' room held replaying them, at most
CHOICES = 3              # domains with different room tried per sibling
FEW = 8                  # alike segments with elastic pods, up to this many, are allotted here
EXACT = 64               # allotments of leaves to small domains valued by exact packing, at most

Allotment = dict[GroupInfo, tuple[int, int]]
Count = Callable[[str, int, np.ndarray], np.ndarray]       # pods of a role that fit in domains of a level


def allot_siblings(state: State, group: GroupInfo, level: int, domain: int, policy: PlacementPolicy,
                   exact: bool = True) -> tuple[Allotment, bool]:
    """For each child of the group placed in (level, domain) that asks for a finer domain: the (level,
    domain) to try first. Empty unless there are two or more such children and some have elastic pods;
    only under a policy that packs elastic pods (binpack; spread takes the emptiest domains, which
    leaves room anyway). With `exact`, a
    few leaves on small domains may be allotted by exact packing instead (then True comes back too)."""
    siblings = [child for child in group.children if _allottable(child, level)]
    if not policy.packs_elastic or len(siblings) < 2 or not any(has_elastic(child) for child in siblings) \
            or _alike(group, siblings):
        return {}, False
    siblings.sort(key=lambda child: -sum(elastic_want(child).values()))   # the most pods first
    rehearsal = Rehearsal(state, group, siblings, level, domain, policy)
    best = rehearsal.best()
    if not exact:
        return best, False
    packed = rehearsal.packed(best)
    return (packed, True) if packed is not None else (best, False)


def _allottable(child: GroupInfo, level: int) -> bool:
    """A child with mandatory pods, free to choose a domain finer than its parent's."""
    own = child.own_level
    return child.need_total > 0 and own is not None and own > level and child.claim is None \
        and not child.pinned.size


def _alike(group: GroupInfo, siblings: list[GroupInfo]) -> bool:
    """Alike segments, allotted by segments.py in the fewest domains (as Kueue's BestFit does), unless
    they are few and each has elastic pods beyond the segment size: when no domain holds a whole one,
    segments.py packs their minimums together and the elastic pods leave."""
    if group.segments is None:
        return False
    wants = {tuple(sorted(elastic_want(child).items())) for child in siblings}
    if len(wants) != 1:
        return False
    return len(siblings) > FEW or sum(elastic_want(siblings[0]).values()) == group.segments.size


class Rehearsal:
    def __init__(self, state: State, group: GroupInfo, siblings: list[GroupInfo], level: int, domain: int,
                 policy: PlacementPolicy):
        self.state = state
        self.group = group
        self.policy = policy
        self.siblings = siblings                 # the most pods first
        self.level, self.domain = level, domain
        self.wants = {child: elastic_want(child) for child in siblings}
        self.everything = sum(sum(want.values()) for want in self.wants.values())
        self.roles = sorted({role for want in self.wants.values() for role in want} & set(state.roles))
        levels = {child.own_level for child in siblings}
        self.initial = {(role, level): state.counts[role][level].copy() for role in self.roles for level in levels}
        self.found: list[tuple[int, Allotment]] = []
        # each replay holds room twice per sibling: many siblings get fewer (one: the greedy allotment)
        self.allotments = max(1, min(ALLOTMENTS, REPLAYED // (2 * len(siblings))))
        self.holds = 0

    def best(self) -> Allotment:
        """The allotment that keeps the most pods in their own sibling's domain (the first on ties)."""
        mark = self.state.mark()
        self.search(0, 0, {})
        if len(self.found) == 1:
            return self.found[0][1]
        best, best_kept = {}, -1
        for _, allotment in sorted(self.found, key=lambda found: -found[0]):
            kept = self.replay(allotment)
            self.state.revert(mark)
            if kept is not None and kept > best_kept:
                best, best_kept = allotment, kept
            if best_kept == self.everything:
                break
        return best

    def packed(self, rehearsed: Allotment) -> Allotment | None:
        """When the siblings are few leaves with small domains: the allotment keeping the most pods in
        their own domains, each domain packed exactly (packing.py), if it keeps more than the rehearsed
        one; the replay fills greedily and the search holds every sibling's whole demand, which misses
        allotments where two siblings share a domain better than either takes it alone."""
        levels = {child.own_level for child in self.siblings}
        if len(levels) != 1 or not all(child.is_leaf for child in self.siblings):
            return None
        options = [self.fitting(child, self.state.count).tolist() for child in self.siblings]
        if not all(options) or math.prod(map(len, options)) > EXACT:
            return None
        level = levels.pop()
        values: dict[tuple, int | None] = {}
        try:
            kept = {targets: self.packed_value(level, targets, values) for targets in itertools.product(*options)}
        except TooLarge:
            return None
        rehearsed_targets = tuple(rehearsed.get(child, (level, -1))[1] for child in self.siblings)
        floor = kept.get(rehearsed_targets)
        best = max(kept, key=lambda targets: -1 if kept[targets] is None else kept[targets])
        if kept[best] is None or (floor is not None and kept[best] <= floor):
            return None
        return {child: (level, target) for child, target in zip(self.siblings, best)}

    def packed_value(self, level: int, targets: tuple, values: dict) -> int | None:
        """Pods kept when each sibling goes to its target, every domain packed exactly; None when some
        domain does not hold its siblings' minimums. Raises TooLarge beyond the search's reach."""
        kept = 0
        for domain in sorted(set(targets)):
            members = tuple(i for i, target in enumerate(targets) if target == domain)
            if (domain, members) not in values:
                values[domain, members] = self.domain_value(level, domain, [self.siblings[i] for i in members])
            if values[domain, members] is None:
                return None
            kept += values[domain, members]
        return kept

    def domain_value(self, level: int, domain: int, children: list[GroupInfo]) -> int | None:
        nodes = self.state.layout.inside(level, domain, self.state.layout.depth)
        roles = sorted({role for child in children for role in self.wants[child]})
        if not packable(self.state, nodes, roles):
            raise TooLarge
        least = [sum(child.need.get(role, 0) for child in children) for role in roles]
        most = [sum(self.wants[child].get(role, 0) for child in children) for role in roles]
        found = most_inside(self.state, nodes, roles, least, most)
        return None if found is None else sum(map(sum, found))

    def search(self, position: int, held: int, chosen: Allotment) -> None:
        """Allotments of siblings[position:], `held` pods held in their domains so far."""
        if position == len(self.siblings):
            self.found.append((held, dict(chosen)))
            return
        child = self.siblings[position]
        options = self.ranked(child, self.fitting(child, self.state.count), self.state.count)
        if not options.size:
            # the room held for the others leaves it none: it takes some of theirs, in the domains
            # that held it before any room was held
            options = self.ranked(child, self.fitting(child, self.before), self.before, distinct=False)
        if not options.size:                 # it climbs (or fails) in the real search
            self.search(position + 1, held, chosen)
            return
        for target in options.tolist():
            if self.found and (self.holds >= HOLDS or len(self.found) >= self.allotments
                               or self.found[0][0] == self.everything):
                return
            self.holds += 1
            mark = self.state.mark()
            chosen[child] = (child.own_level, target)
            self.search(position + 1, held + self.hold(child, target, self.wants[child]), chosen)
            del chosen[child]
            self.state.revert(mark)

    def before(self, role: str, level: int, domains: np.ndarray) -> np.ndarray:
        """Pods of the role that fit in the domains before any room was held (a `Count`)."""
        return self.initial[role, level][domains]

    def fitting(self, child: GroupInfo, count: Count) -> np.ndarray:
        """Domains of the child's level with room for its mandatory pods."""
        level = child.own_level
        domains = in_scope(self.state.layout, level, self.level, self.domain)
        keep = np.ones(len(domains), dtype=bool)
        for role, need in child.need.items():
            if need:
                keep &= count(role, level, domains) >= need
        return domains[keep]

    def ranked(self, child: GroupInfo, domains: np.ndarray, count: Count, distinct: bool = True) -> np.ndarray:
        """A few of the domains, best first: those that hold all the child's pods, tightest first,
        then the others, the most room first; with `distinct`, one of each room."""
        if not domains.size:
            return domains
        level, want = child.own_level, self.wants[child]
        counts = np.stack([count(role, level, domains) for role in self.roles])
        wanted = np.array([want.get(role, 0) for role in self.roles])[:, None]
        whole = (counts >= wanted).all(axis=0)
        primary = max(want, key=want.get)
        leftover = count(primary, level, domains) - want[primary]
        room = np.minimum(counts, wanted).sum(axis=0)
        order = np.lexsort([domains, np.where(whole, leftover, -room), ~whole])
        if distinct:
            rooms = counts[0, order] if len(counts) == 1 else counts[:, order]      # 1-D: much faster
            _, first = np.unique(rooms, axis=None if len(counts) == 1 else 1, return_index=True)
            order = order[np.sort(first)]
        return domains[order[:CHOICES]]

    def hold(self, child: GroupInfo, domain: int, pods: dict[str, int]) -> int:
        """Hold room in the child's domain for up to `pods` of each role, as many as fit; the pods held."""
        held = 0
        for role, count in sorted(pods.items()):
            if count > 0:
                nodes, placed = select(self.state, role, child.own_level, domain, count, self.policy, partial=True)
                if placed.size:
                    self.state.place(role, nodes, placed, NO_SLOTS)
                held += int(placed.sum())
        return held

    def replay(self, allotment: Allotment) -> int | None:
        """Pods kept in their own sibling's domain when the placer follows the allotment: every
        sibling's mandatory pods first, in tree order (None when they do not fit), then the elastic
        pods, each sibling's inside its own domain."""
        order = [child for child in self.group.children if child in allotment]
        kept = 0
        for child in order:
            need = sum(child.need.values())
            if self.hold(child, allotment[child][1], child.need) < need:
                return None
            kept += need
        for child in order:
            elastic = {role: want - child.need.get(role, 0) for role, want in self.wants[child].items()}
            kept += self.hold(child, allotment[child][1], elastic)
        return kept
