"""Placing a group tree.

Each group climbs its ladder of levels (finest first, never above its required level or its parent's
domain) and tries a bounded number of candidate domains per level, best first; inside a domain it places
its children (or, for a leaf, its pods). The search is a backtracking one written with continuations:
`place_group(group, ..., then)` places the group and calls `then` to place everything after it; when
that fails, the group tries its next candidate. A budget of candidate tries bounds the search: once it is
spent, no placement that has succeeded is reconsidered (the search becomes greedy), so plan time stays
predictable. Before a group places its children, segments.py and siblings.py allot them the domains
to try first, chosen for all of them together. Mandatory pods of the whole tree come first (a leaf's
keep clear of the room its placed siblings' elastic pods will take when they can); then every leaf's
elastic pods inside its own domain (a small domain that leaves some out is packed exactly, packing.py),
then the rest and extra subgroups, as close as possible, never outside a required domain."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import takewhile

import numpy as np

from .candidates import candidates, has_elastic, holds_elastic
from .demand import GroupInfo
from .fill import select
from .joint import Rest, rest_fits, summarize_rests
from .layout import ROOT
from .packing import fill_packed, repack
from .segments import allot
from .siblings import allot_siblings
from .state import State

UNLIMITED = 1 << 62
LEAF_VARIANTS = 6            # refills of a leaf holding back room its first fill used, while searching
NO_SLOTS = np.empty(0, dtype=np.int64)
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


def required_ceiling(group: GroupInfo) -> int:
    """The finest required level of the group and its ancestors: its pods never leave that domain."""
    return max((g.required for g in group.ancestors() if g.required is not None), default=ROOT)


class Placer:
    def __init__(self, state: State, occupied: list[np.ndarray] | None, spread: bool, budget: int, explainer=None,
                 exact: bool = True):
        self.state = state
        self.layout = state.layout
        self.occupied = occupied
        self.spread = spread
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
        return candidates(self.state, group, level, scope_level, scope_domain, self.occupied, self.spread,
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
        allotted, packed = allot_siblings(self.state, group, level, domain, self.spread, self.exact)
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
            chosen = select(self.state, shape.role, shape.level, target, wanted.size, self.spread)
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
                or shape.role in self.state.one_per_node or self.held or self.claims:
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
        total = 0
        for child in group.children:
            if child in self.where or child in self.sealed:
                total += self.counted(child)
            elif child.done is not None:
                total += child.done          # satisfied by its running pods alone
        return total

    def _place_leaf(self, group: GroupInfo, level: int, domain: int, then: Then) -> bool:
        """Fill the leaf's pods into the domain, then `then`. When that fails, refill with one node of
        the first fill left out, or holding one pod fewer (a later group may need exactly that room),
        a few times while the search budget lasts."""
        variants: list[tuple[str, int, bool]] = []
        for attempt in range(1 + LEAF_VARIANTS):
            if attempt:
                if attempt > len(variants) or not self.searching:
                    return False
                self.tried += 1
            mark = self.state.mark()
            if attempt:
                role, node, avoid = variants[attempt - 1]
                self._hold_back(role, node, avoid)
            placed = self._fill_leaf(group, level, domain)
            if attempt:
                self._hold_back(role, node, avoid, undo=True)
            if placed and then():
                return True
            if not attempt and placed and group.mandatory:
                variants = self._variants(group)
            self.state.revert(mark)
            if not placed and not attempt:
                return False
        return False

    def _variants(self, group: GroupInfo) -> list[tuple[str, int, bool]]:
        """(role, node, leave the node out entirely?) for each node the first fill used."""
        variants = []
        for role, ids in group.mandatory:
            nodes, pods = np.unique(self.state.node_of[ids], return_counts=True)
            for node, count in zip(nodes.tolist(), pods.tolist()):
                variants.append((role, node, True))
                if count > 1:
                    variants.append((role, node, False))
        return variants

    def _hold_back(self, role: str, node: int, avoid: bool, undo: bool = False) -> None:
        """Hide the node from the fill, or take the room of one pod of `role` from it (a phantom pod)."""
        nodes = np.array([node], dtype=np.int64)
        if avoid:
            if undo:
                self.state.block(self._hidden, False)
            else:
                self._hidden = self.state.block(nodes)
        else:
            self.state.place(role, nodes, np.array([-1 if undo else 1], dtype=np.int64), NO_SLOTS)

    def _fill_leaf(self, group: GroupInfo, level: int, domain: int) -> bool:
        """The leaf's mandatory pods, keeping clear of the room its placed siblings' elastic pods will
        take in their own domains when that is possible (the tightest nodes are often exactly that);
        in the domain exact packing allotted it, where that packing puts them."""
        mark = self.state.mark()
        if self.pack_targets.get(group) == (level, domain):
            shared = [leaf for leaf, target in self.pack_targets.items() if target == (level, domain)]
            if fill_packed(self.state, group, level, domain, shared):
                return True
        held = self._hold_for_siblings(group, level, domain)
        if held:
            placed = self._fill(group, level, domain)
            for role, nodes, pods in held:
                self.state.place(role, nodes, -pods, NO_SLOTS)
            if placed:
                return True
            self.state.revert(mark)
        return self._fill(group, level, domain)

    def _hold_for_siblings(self, group: GroupInfo, level: int,
                           domain: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Room held for the elastic pods of the leaf's placed siblings, inside their own domains (those
        that meet the domain being filled)."""
        if group.parent is None:
            return []
        held = []
        for sibling in self._elastic_leaves(group.parent):
            if sibling is group or sibling not in self.where or sibling in self.frozen:
                continue
            home, around = self._home(sibling)
            if not self._meet(level, domain, home, around):
                continue
            for role, ids in sibling.optional:
                waiting = int(np.count_nonzero(self.state.node_of[ids] < 0))
                if waiting:
                    nodes, pods = select(self.state, role, home, around, waiting, self.spread, partial=True)
                    if pods.size:
                        self.state.place(role, nodes, pods, NO_SLOTS)
                        held.append((role, nodes, pods))
        return held

    def _elastic_leaves(self, group: GroupInfo) -> list[GroupInfo]:
        """The group's children that are leaves with elastic pods (kept: asked at every leaf fill)."""
        found = self._elastic_children.get(group)
        if found is None:
            found = self._elastic_children[group] = [child for child in group.children
                                                     if child.is_leaf and child.optional]
        return found

    def _meet(self, level: int, domain: int, other_level: int, other: int) -> bool:
        """Whether two domains overlap: one lies inside the other."""
        if level < other_level:
            level, domain, other_level, other = other_level, other, level, domain
        return other_level < 0 or int(self.layout.ancestors(level, other_level)[domain]) == other

    def _home(self, leaf: GroupInfo) -> tuple[int, int]:
        """The leaf's own domain: of the level it asked for, around the domain it was placed in."""
        level, domain = self.where[leaf]
        home = self._home_level(leaf, level, required_ceiling(leaf))
        return home, (int(self.layout.ancestors(level, home)[domain]) if home >= 0 else 0)

    def _fill(self, group: GroupInfo, level: int, domain: int) -> bool:
        for role, ids in group.mandatory:
            chosen = select(self.state, role, level, domain, len(ids), self.spread)
            if chosen is None:
                return False
            self.state.place(role, chosen[0], chosen[1], ids)
        return True

    def _forget(self, group: GroupInfo) -> None:
        """Drop what reverted attempts recorded for the group's descendants."""
        for below in group.walk():
            if below is not group:
                self.where.pop(below, None)
                self.claims.pop(below, None)
                self.sealed.discard(below)
                self.frozen.discard(below)

    # --- elastic -------------------------------------------------------------------------------------------
    def place_elastic(self, root: GroupInfo) -> int:
        """Every placed leaf's elastic pods in its own domain, then the rest one level up at a time and
        the extra subgroups: a leaf climbing out of its domain does not take a later sibling's room."""
        if root in self.frozen:
            return 0
        at_home = self._elastic(root, *self.where[root], UNLIMITED, climb=False)
        crowded = self._crowded_homes(root)
        if not crowded:
            return at_home + self._elastic(root, *self.where[root], UNLIMITED)
        return at_home + self._repacked(root, crowded)

    def _repacked(self, root: GroupInfo, crowded: dict[tuple[int, int], list[GroupInfo]]) -> int:
        """The rest of the elastic pods after packing the crowded home domains exactly (packing.py),
        unless that places fewer pods in all than the greedy fill: then as before."""
        mark, saved = self.state.mark(), self._bookkeeping()
        self._elastic(root, *self.where[root], UNLIMITED)
        greedy = self.state.placed_count
        self.state.revert(mark)
        self._restore(saved)
        gained = sum(repack(self.state, leaves, level, domain) for (level, domain), leaves in crowded.items())
        if gained:
            placed = gained + self._elastic(root, *self.where[root], UNLIMITED)
            if self.state.placed_count >= greedy:
                return placed
            self.state.revert(mark)
            self._restore(saved)
        return self._elastic(root, *self.where[root], UNLIMITED)

    def _crowded_homes(self, root: GroupInfo) -> dict[tuple[int, int], list[GroupInfo]]:
        """Placed leaves (no running pods) by their own domain, for the domains where some of them
        still wait with elastic pods; only under binpack and without exclusive domains."""
        if self.spread or self.claims or self.held:
            return {}
        homes: dict[tuple[int, int], list[GroupInfo]] = {}
        for leaf in root.walk():
            if leaf.is_leaf and leaf in self.where and leaf not in self.frozen and not leaf.bound:
                homes.setdefault(self._home(leaf), []).append(leaf)
        node_of = self.state.node_of
        return {home: leaves for home, leaves in homes.items()
                if any((node_of[ids] < 0).any() for leaf in leaves for _, ids in leaf.optional)}

    def _bookkeeping(self) -> tuple:
        return (dict(self.where), dict(self.claims), set(self.sealed), set(self.frozen), dict(self.targets),
                dict(self.pack_targets), self.tried)

    def _restore(self, saved: tuple) -> None:
        where, claims, sealed, frozen, targets, pack_targets, self.tried = saved
        for mine, kept in ((self.where, where), (self.claims, claims), (self.sealed, sealed),
                           (self.frozen, frozen), (self.targets, targets), (self.pack_targets, pack_targets)):
            mine.clear()
            mine.update(kept)

    def _elastic(self, group: GroupInfo, level: int, domain: int, limit: int, climb: bool = True) -> int:
        """Up to `limit` more pods in the subtree: elastic pods of placed leaves, then subgroups beyond
        minSubGroup, each inside its own domain first and never outside a required one (without
        `climb`: only placed leaves, only inside their own domain)."""
        if group.is_leaf:
            return self._extra_pods(group, limit, climb=climb)
        placed = 0
        for child in group.children:
            if placed >= limit:
                break
            if child in self.frozen:
                continue
            if child in self.where:
                placed += self._elastic(child, *self.where[child], limit - placed, climb)
                continue
            if not climb:
                continue
            before = self.pods_in(child)
            if self.place_group(child, *self._elastic_scope(group, level, domain)):
                placed += self.pods_in(child) - before
                if child not in self.frozen:
                    placed += self._elastic(child, *self.where[child], limit - placed)
        return placed

    def _elastic_scope(self, group: GroupInfo, level: int, domain: int) -> tuple[int, int]:
        """Elastic pods may go anywhere inside the nearest required domain (the whole cluster if none);
        the ladder and the sibling order keep them close to the rest."""
        ceiling = required_ceiling(group)
        if ceiling >= level:
            return level, domain
        return ceiling, (int(self.layout.ancestors(level, ceiling)[domain]) if ceiling >= 0 else 0)

    def _extra_pods(self, leaf: GroupInfo, limit: int, pods: list[tuple[str, np.ndarray]] | None = None,
                    climb: bool = True) -> int:
        node_of = self.state.node_of
        waiting = []
        for role, ids in leaf.optional if pods is None else pods:
            ids = ids[node_of[ids] < 0][:limit]
            limit -= ids.size
            if ids.size:
                waiting.append((role, ids))
        if not waiting:
            return 0
        changes = self._open_for(leaf)
        placed = 0
        level, domain = self.where[leaf]
        ceiling = required_ceiling(leaf)
        top = ceiling if climb else self._home_level(leaf, level, ceiling)
        for step in range(level, top - 1, -1):
            around = int(self.layout.ancestors(level, step)[domain]) if step >= 0 else 0
            rest = []
            for role, ids in waiting:
                nodes, pods = select(self.state, role, step, around, ids.size, self.spread, partial=True)
                count = int(pods.sum())
                if count:
                    self.state.place(role, nodes, pods, ids[:count])
                    placed += count
                if count < ids.size:
                    rest.append((role, ids[count:]))
            waiting = rest
            if not waiting:
                break
        self._undo(changes)
        return placed

    @staticmethod
    def _home_level(leaf: GroupInfo, level: int, ceiling: int) -> int:
        """The level of the leaf's own domain: the one it asked for (it may have been placed in a finer
        one), never above its required ceiling."""
        own = leaf.own_level
        return level if own is None or own > level else max(own, ceiling)

    def _open_for(self, leaf: GroupInfo) -> list[tuple[np.ndarray, bool]]:
        """Show the exclusive domains of the leaf's ancestors, keeping every other group's hidden
        (they may nest); returns what changed, to undo."""
        if not self.claims and not self.held:
            return []
        mine = [g for g in leaf.ancestors() if g in self.claims or g in self.held]
        changes = [(self.state.block(self.claims.get(g, self.held.get(g)), False), False) for g in mine]
        for group, nodes in list(self.claims.items()) + list(self.held.items()):
            if group not in mine:
                changes.append((self.state.block(nodes, True), True))
        return changes

    # --- views ---------------------------------------------------------------------------------------------
    def pods_in(self, group: GroupInfo) -> int:
        return int(np.count_nonzero(self.state.node_of[group.ids] >= 0))

    def nodes_of(self, group: GroupInfo) -> np.ndarray:
        nodes = self.state.node_of[group.ids]
        return nodes[nodes >= 0]
