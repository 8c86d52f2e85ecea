"""Placing a group tree.

Each group climbs its ladder of levels (from its preferred level, never above its required level or its
parent's domain) and tries every candidate domain of a level that passes the counts, best first (a level
is never given up while one is untried, so the search is complete within its budget); inside a domain it places
its children (or, for a leaf, its pods). The search is a backtracking one written with continuations:
`place_group(group, ..., then)` places the group and calls `then` to place everything after it; when
that fails, the group tries its next candidate. A budget of candidate tries bounds the search: once it is
spent, no placement that has succeeded is reconsidered (the search becomes greedy), so plan time stays
predictable. Before a group places its children, segments.py and siblings.py allot them the domains
to try first, chosen for all of them together. Mandatory pods of the whole tree come first (a leaf's
fill: leaf.py); then the elastic pods and extra subgroups (elastic.py), as close as possible, never
outside a required domain. This file holds the search itself: ladders, candidates, claims, children."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import takewhile

import numpy as np

from .candidates import candidates, has_elastic, holds_elastic
from .demand import GroupInfo
from .elastic import ElasticPhase
from .fill import select
from .joint import Rest, rest_fits, summarize_rests
from .layout import ROOT
from .leaf import LeafFill
from .policies import PlacementPolicy
from .segments import allot
from .siblings import allot_siblings
from .state import NO_SLOTS, State

Then = Callable[[], bool]


def _done() -> bool:
    return True


def preferred_first(levels: list[int], group: GroupInfo) -> list[int]:
    """The ladder from the group's preferred level up, then the finer levels. Climbing from single
    nodes, the tightest fit at a level finer than the one asked for is often a whole free node or rack
    that a later gang needs whole; from its preferred level the group takes the tightest domain that
    holds it (as Kueue's BestFit does) and fills it tightest child first, so it still lands on one
    node or rack when that domain has one that holds it."""
    if group.preferred is None or group.preferred not in levels:
        return levels
    position = levels.index(group.preferred)
    return levels[position:] + levels[:position]


def children_level(group: GroupInfo) -> int:
    """The coarsest level at which the group's children ask for a domain each (preferred, else required);
    -2, above every level, when none does."""
    return min((child.own_level for child in group.children if child.own_level is not None), default=ROOT - 1)


class Placer(LeafFill, ElasticPhase):
    def __init__(self, state: State, occupied: list[np.ndarray] | None, policy: PlacementPolicy, budget: int,
                 explainer=None, exact: bool = True):
        self.state = state
        self.layout = state.layout
        self.occupied = occupied
        self.policy = policy
        self.budget = budget
        self.where: dict[GroupInfo, tuple[int, int]] = {}
        self.claims: dict[GroupInfo, np.ndarray] = {}     # exclusive domains taken by this plan
        self.held: dict[GroupInfo, np.ndarray] = {}       # exclusive domains held by running pods
        self.sealed: set[GroupInfo] = set()               # satisfied without a domain (nothing to place)
        self.frozen: set[GroupInfo] = set()               # sealed subtrees: no elastic pods
        self.failures: dict[GroupInfo, str] = {}
        self.targets: dict[GroupInfo, tuple[int, int]] = {}  # segment -> the domain allotted to it
        self.explainer = explainer
        self.exact = exact                                # siblings may be allotted by exact packing
        self.packed = False                               # some were
        self.pack_targets: dict[GroupInfo, tuple[int, int]] = {}   # leaf -> the domain packing allotted it
        self.tried = 0
        self._hidden = NO_SLOTS                           # the node a leaf refill leaves out
        self._rests: dict[int, tuple[list[GroupInfo], list[Rest]]] = {}   # id(order) -> summaries
        self._elastic_children: dict[GroupInfo, list[GroupInfo]] = {}

    @property
    def searching(self) -> bool:
        return self.tried <= self.budget

    def hold_running(self, root: GroupInfo) -> None:
        """An exclusive group with running pods keeps their domain: hidden from the rest of the gang."""
        for group in root.walk():
            if group.claim is None or not group.pinned.size:
                continue
            owners = self.layout.node_ancestor(group.pinned, group.claim)
            owners = np.unique(owners[owners >= 0])
            if owners.size == 1:
                nodes = self.layout.inside(group.claim, int(owners[0]), self.layout.depth)
                self.held[group] = nodes
                self.state.block(nodes)

    # --- mandatory ---------------------------------------------------------------------------------------
    def place_group(self, group: GroupInfo, scope_level: int, scope_domain: int, then: Then = _done) -> bool:
        """Place the group's mandatory pods inside the scope domain, then `then`; False (state untouched)
        when no candidate makes both work."""
        if not self.held:
            return self._place_group(group, scope_level, scope_domain, then)
        # a held domain is visible to its holder's ancestors and descendants, hidden from everyone else
        related = [h for h in self.held
                   if any(a is group for a in h.ancestors()) or any(a is h for a in group.ancestors())]
        mark = self.state.mark()
        changes = self._reveal(related)

        def after() -> bool:
            self._undo(changes)
            if then():
                return True
            changes[:] = self._reveal(related)
            return False

        if self._place_group(group, scope_level, scope_domain, after):
            return True
        self.state.revert(mark)
        return False

    def _reveal(self, related: list[GroupInfo]) -> list[tuple[np.ndarray, bool]]:
        """Show the held domains of `related` groups, hide every other one (domains may nest); the
        changes made, to undo in reverse."""
        changes = [(self.state.block(self.held[h], False), False) for h in related]
        changes += [(self.state.block(nodes, True), True) for h, nodes in self.held.items() if h not in related]
        # domains claimed so far belong to groups already placed, never to this one or its ancestors
        changes += [(self.state.block(nodes, True), True) for nodes in self.claims.values()]
        return changes

    def _undo(self, changes: list[tuple[np.ndarray, bool]]) -> None:
        for nodes, value in reversed(changes):
            self.state.block(nodes, not value)

    def _place_group(self, group: GroupInfo, scope_level: int, scope_domain: int, then: Then) -> bool:
        ceiling = scope_level if group.required is None else max(group.required, scope_level)
        later_failed = False
        failed: list[tuple[int, int, tuple]] = []
        dead_ends: set = set()
        # nothing mandatory: no point trying finer domains, elastic pods fill compactly from the top
        finest = ceiling if group.need_total == 0 else self.layout.depth     # depth: a single node
        for level in self._ladder(group, finest, ceiling, scope_level, scope_domain):
            for domain in self._candidates(group, level, scope_level, scope_domain).tolist():
                room = self._room(group, level, domain)
                if self._same_as_failed(group, level, domain, room, failed):
                    continue
                self.tried += 1
                reached = False

                def cont() -> bool:
                    nonlocal reached
                    reached = True
                    signature = self._signature(group)
                    if signature in dead_ends:       # the same as an attempt that led nowhere
                        return False
                    if then():
                        return True
                    dead_ends.add(signature)
                    return False

                mark = self.state.mark()
                if self._enter(group, level, domain, cont):
                    return True
                self.state.revert(mark)
                self._forget(group)
                failed.append((level, domain, room))
                later_failed |= reached
                if reached and not self.searching:
                    return False
        if group.need_total == 0 and self._empty(group, scope_level, scope_domain, then):
            return True
        if not later_failed and self.explainer is not None:
            self.failures[group] = self.explainer(self, group, scope_level, scope_domain, ceiling)
        return False

    def _ladder(self, group: GroupInfo, finest: int, ceiling: int, scope_level: int, scope_domain: int) -> list[int]:
        """Levels finest first, from the group's preferred level if it has one (the finer levels come
        last); for a group with elastic pods, from the first level with a domain that holds them all
        (the finer levels, whose domains hold only the minimum, come last), else from the first level
        above its children's own levels, where each child can take a domain with room for its elastic
        pods instead of sharing one with its siblings' minimums."""
        levels = preferred_first(list(range(finest, ceiling - 1, -1)), group)
        if group.need_total == 0 or not has_elastic(group) or group in self.targets:
            return levels            # a segment's allotted domain already counts its elastic pods
        start = next((level for level in levels if self._holds_elastic(group, level, scope_level, scope_domain)),
                     next((level for level in levels if level < children_level(group)), None))
        if start is None:
            return levels
        position = levels.index(start)
        return levels[position:] + levels[:position]

    def _holds_elastic(self, group: GroupInfo, level: int, scope_level: int, scope_domain: int) -> bool:
        domains = self._candidates(group, level, scope_level, scope_domain)
        return bool(holds_elastic(self.state, group, level, domains).any())

    def _signature(self, group: GroupInfo) -> tuple:
        """What the rest of the search sees of a placed group: its pods' nodes (for an exclusive group
        only its domain and pod count: nobody else may enter it), the exclusive domains claimed below
        it, and which descendants are satisfied where."""
        claim = self.claims.get(group)
        if claim is not None:
            placed = ("claim", int(claim[0]), self.pods_in(group))
        else:
            placed = self.state.node_of[group.ids].tobytes()
        return placed, self._claims_below(group), self._satisfied_below(group)

    def _claims_below(self, group: GroupInfo) -> tuple:
        if not self.claims:
            return ()
        return tuple(int(self.claims[g][0]) for g in group.walk() if g in self.claims)

    def _satisfied_below(self, group: GroupInfo) -> tuple:
        """Which descendants are satisfied, and where: decides what counts and where elastic pods grow."""
        if group.is_leaf:
            return (self.where.get(group),) if group.optional else ()
        return tuple((self.where.get(g), g in self.sealed) for g in group.walk() if g is not group)

    def _room(self, group: GroupInfo, level: int, domain: int) -> tuple:
        return tuple(int(self.state.count(role, level, domain)) for role in sorted(group.roles))

    def _same_as_failed(self, group: GroupInfo, level: int, domain: int, room: tuple, failed) -> bool:
        """A domain whose room for the group is all inside a finer domain that already failed offers
        nothing new (unless only the coarser one escapes the group's exclusive claim)."""
        if group.claim is not None and level < group.claim:
            return False
        return any(finer > level and room == finer_room
                   and self.layout.ancestors(finer, level)[finer_domain] == domain
                   for finer, finer_domain, finer_room in failed)

    def _candidates(self, group: GroupInfo, level: int, scope_level: int, scope_domain: int) -> np.ndarray:
        return candidates(self.state, group, level, scope_level, scope_domain, self.occupied, self.policy,
                          self._near(group), self.targets.get(group), self._siblings(group))

    def _siblings(self, group: GroupInfo) -> np.ndarray | None:
        """The nodes of the pods placed so far in the group's parent (its siblings'): the gang's
        domains the group should stay in."""
        return None if group.parent is None else self.nodes_of(group.parent)

    def _near(self, group: GroupInfo) -> int | None:
        """A node of the sibling placed just before this group (segment i+1 goes next to segment i)."""
        parent = group.parent
        if parent is None:
            return None
        for position in range(group.position - 1, max(-1, group.position - 9), -1):
            nodes = self.nodes_of(parent.children[position])
            if nodes.size:
                return int(nodes[-1])
        return None

    def _empty(self, group: GroupInfo, scope_level: int, scope_domain: int, then: Then) -> bool:
        """A group with nothing to place needs no domain: satisfied as it is, and sealed (no elastic
        pods) since it has no domain to keep them in."""
        before = self.state.placed_count
        mark = self.state.mark()

        def sealed() -> bool:
            if self.state.placed_count != before:
                return False
            below = list(group.walk())
            self.sealed.add(group)
            self.frozen.update(below)
            if then():
                return True
            self.sealed.discard(group)
            self.frozen.difference_update(below)
            return False

        if self._contents(group, scope_level, scope_domain, sealed):
            return True
        self.state.revert(mark)
        self._forget(group)
        return False

    def _enter(self, group: GroupInfo, level: int, domain: int, then: Then) -> bool:
        claim = None if group in self.held else self._claim(group, level, domain)
        if claim is False:
            return False

        def entered() -> bool:
            self.where[group] = (level, domain)
            if claim is not None:
                self.claims[group] = claim
                self.state.block(claim)
            if then():
                return True
            self.where.pop(group, None)
            self.claims.pop(group, None)
            return False

        return self._contents(group, level, domain, entered)

    def _claim(self, group: GroupInfo, level: int, domain: int):
        """The nodes of the group's exclusive domain, None when it claims none, False when it is taken."""
        if group.claim is None or level < group.claim:
            return None
        owner = int(self.layout.ancestors(level, group.claim)[domain])
        nodes = self.layout.inside(group.claim, owner, self.layout.depth)
        own = int(np.isin(self.nodes_of(group), nodes).sum()) if group.pinned.size else 0
        if int(self.state.gang[nodes].sum()) - own > 0:
            return False
        return nodes

    def _contents(self, group: GroupInfo, level: int, domain: int, then: Then) -> bool:
        if group.is_leaf:
            return self._place_leaf(group, level, domain, then)
        for child in group.children:     # targets allotted in another domain of this group are stale here
            self.targets.pop(child, None)
            self.pack_targets.pop(child, None)
        self.targets.update(allot(self.state, group, level, domain))     # segments: all together
        allotted, packed = allot_siblings(self.state, group, level, domain, self.policy, self.exact)
        self.targets.update(allotted)        # elastic room
        if packed:
            self.packed = True
            self.pack_targets.update(allotted)
        if self._segments_at_once(group, level, domain, then):
            return True
        for order in self._child_orders(group):
            mark = self.state.mark()
            if self._children(group, order, 0, 0, level, domain, then):
                return True
            self.state.revert(mark)
            self._forget(group)
            if not self.searching:
                break
        return False

    def _segments_at_once(self, group: GroupInfo, level: int, domain: int, then: Then) -> bool:
        """Alike segments that each need a whole domain of their level, every one with its allotted
        domain: filled one allotted domain at a time (all its segments in one fill, consecutive pods
        to each segment) instead of one segment at a time. Where the result is what the one-by-one
        search would reach first (no finer domain holds a segment, so each would climb to its level
        and take its allotted domain); when it does not fit or leads nowhere, the one-by-one search
        runs as before."""
        allotted = self._allotted_segments(group)
        if allotted is None:
            return False
        shape = group.segments
        nodes, pods, ids = [], [], []
        for target, children in allotted.items():      # disjoint domains: one fill does not change another
            wanted = np.concatenate([child.mandatory[0][1] for child in children])
            chosen = select(self.state, shape.role, shape.level, target, wanted.size, self.policy)
            if chosen is None:
                return False
            nodes.append(chosen[0])
            pods.append(chosen[1])
            ids.append(wanted)
        mark = self.state.mark()
        self.state.place(shape.role, np.concatenate(nodes), np.concatenate(pods), np.concatenate(ids))
        for target, children in allotted.items():
            for child in children:
                self.where[child] = (shape.level, target)
        self.tried += 1
        if self._children(group, group.children, len(group.children), len(group.children), level, domain, then):
            return True
        self.state.revert(mark)
        self._forget(group)
        return False

    def _allotted_segments(self, group: GroupInfo) -> dict[int, list[GroupInfo]] | None:
        """The group's segments by allotted domain when they can be filled at once (see above)."""
        shape = group.segments
        if shape is None or not shape.hard or group.k != len(group.children) or shape.role in self.state.apart \
                or shape.role in self.state.per_node or self.held or self.claims:
            return None
        allotted: dict[int, list[GroupInfo]] = {}
        for child in group.children:
            target = self.targets.get(child)
            if target is None or target[0] != shape.level or child.required != shape.level or child.bound \
                    or child.optional or child.claim is not None or len(child.mandatory) != 1:
                return None
            allotted.setdefault(target[1], []).append(child)
        fit = self.state.counts[shape.role]
        if any(int(fit[finer].max(initial=0)) >= shape.size for finer in range(shape.level + 1, len(fit))):
            return None                      # a finer domain holds a segment: the one-by-one ladder may differ
        return allotted

    def _child_orders(self, group: GroupInfo) -> Iterator[list[GroupInfo]]:
        """Tree order first (rank order); then the most constrained children first: those whose roles
        have room on the fewest nodes, the biggest first, or those confined to the finest domains."""
        yield group.children
        if len(group.children) < 2:
            return
        room = {role: int(np.count_nonzero(self.state.fit[role])) for role in self.state.roles}
        def constrained(child: GroupInfo) -> tuple:
            nodes = min((room[role] for role, need in child.need.items() if need), default=1 << 62)
            return nodes, -child.need_total
        def confined(child: GroupInfo) -> tuple:
            finest = max((g.required for g in child.walk() if g.required is not None), default=ROOT - 1)
            return -finest, -child.need_total
        others = [sorted(group.children, key=constrained),
                  sorted(group.children, key=lambda child: -child.need_total),
                  sorted(group.children, key=confined)]
        seen = [group.children]
        for order in others:
            if order not in seen:
                seen.append(order)
                yield order

    def _children(self, group: GroupInfo, order: list[GroupInfo], position: int, satisfied: int,
                  level: int, domain: int, then: Then) -> bool:
        """Satisfy `group.k` children, and more while the subtree holds fewer than its minMember pods;
        a child that cannot be placed (or whose placement leads nowhere) is left for the elastic phase
        when enough others remain."""
        if satisfied >= group.k:
            short = group.min_pods - self.counted(group)
            for backwards in ((False,) if short <= 0 else (False, True)):
                mark = self.state.mark()
                adopted: list[GroupInfo] = []
                if short > 0:     # growing a leaf not entered also makes its running pods count
                    self._grow(group, short, backwards, adopted)
                enough = group.min_pods - self.counted(group) <= 0
                if enough and then():
                    return True
                self.state.revert(mark)
                for leaf in adopted:
                    self.where.pop(leaf, None)
                if enough and not self.searching:   # more children might still help an ancestor's minMember
                    return False
        if position == len(order) or len(order) - position < group.k - satisfied:
            return False
        # what is still missing no longer fits: earlier children must move (unless a placed child's
        # exclusive domain, hidden from the counts, holds room for its own elastic pods)
        if not self._claims_below(group) and not rest_fits(self.state, group, self._rest(group, order, position),
                                                           satisfied, lambda: self.counted(group), level, domain):
            return False
        child = order[position]
        if self.place_group(child, level, domain,
                            lambda: self._children(group, order, position + 1, satisfied + 1, level, domain, then)):
            return True
        return self._children(group, order, position + 1, satisfied, level, domain, then)

    def _rest(self, group: GroupInfo, order: list[GroupInfo], position: int) -> Rest:
        """The summary of order[position:], made once per child order (the order is kept with it, so
        its id is not reused while cached)."""
        cached = self._rests.get(id(order))
        if cached is None or cached[0] is not order:
            cached = self._rests[id(order)] = (order, summarize_rests(group, order))
        return cached[1][position]

    def _grow(self, group: GroupInfo, limit: int, backwards: bool = False,
              adopted: list[GroupInfo] | None = None) -> int:
        """Elastic pods of the subtree's leaves, up to `limit` (for an inner minMember); the leaves in tree
        order, or the other way round (which leaf grows first can matter). A leaf not entered (its parent
        needs none of its subgroups, minSubGroup 0) grows in the domain of its nearest entered ancestor;
        such leaves are appended to `adopted` for the caller to forget when it backs out."""
        placed = 0
        leaves = [leaf for leaf in group.walk() if leaf.is_leaf]
        for leaf in reversed(leaves) if backwards else leaves:
            if placed >= limit:
                break
            if leaf in self.frozen:
                continue
            if leaf in self.where:
                placed += self._extra_pods(leaf, limit - placed)
                continue
            home = next((a for a in leaf.ancestors() if a in self.where), None)
            if home is None or not any(a is group for a in home.ancestors()):
                continue
            between = takewhile(lambda a: a is not home, leaf.ancestors())
            if any(a.claim is not None or a.required is not None for a in between):
                continue                     # it needs a domain of its own: not grown in its ancestor's
            mark = self.state.mark()
            self.where[leaf] = self.where[home]
            mandatory = sum(ids.size for _, ids in leaf.mandatory)
            grown = self._extra_pods(leaf, max(limit - placed, mandatory), leaf.mandatory + leaf.optional)
            if grown and self.pods_in(leaf) >= leaf.min_pods:       # the leaf's own minimum holds
                placed += grown
                if adopted is not None:
                    adopted.append(leaf)
            else:
                self.state.revert(mark)
                self.where.pop(leaf)
        return placed

    def counted(self, group: GroupInfo) -> int:
        """Pods of the subtree that count toward its minMember: those in satisfied children."""
        if group.is_leaf:
            return self.pods_in(group)
        total, leaves = 0, []
        for child in group.children:
            if child in self.where or child in self.sealed:
                if child.is_leaf:
                    leaves.append(child.ids)
                else:
                    total += self.counted(child)
            elif child.done is not None:
                total += child.done          # satisfied by its running pods alone
        if leaves:                           # the satisfied leaves' placed pods in one count
            ids = group.ids if len(leaves) == len(group.children) else np.concatenate(leaves)
            total += int(np.count_nonzero(self.state.node_of[ids] >= 0))
        return total

    # --- views ---------------------------------------------------------------------------------------------
    def pods_in(self, group: GroupInfo) -> int:
        return int(np.count_nonzero(self.state.node_of[group.ids] >= 0))

    def nodes_of(self, group: GroupInfo) -> np.ndarray:
        nodes = self.state.node_of[group.ids]
        return nodes[nodes >= 0]
