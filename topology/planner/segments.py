"""Where a group's segments go, chosen for all of them together (issue 15 item 2).

Placed one at a time, each segment in the tightest domain near the previous one, a segmented group
spreads over more racks and hosts than the same pods need in whole segments. Instead, before its
children are placed, the group splits its segments over the domains below its own, level by level,
as Kueue's BestFit does: at each level the domains with room for the most whole segments take as many
as they hold, and the remainder goes to the tightest domain that holds it all. Each segment is then
placed with its allotted domain tried first; the search may still move it (the allotment is a
preference, not a rule), so completeness is unchanged."""
from __future__ import annotations

import numpy as np

from .demand import GroupInfo, SegmentShape
from .fewest import fewest_domains
from .layout import ROOT
from .state import State


def allot(state: State, group: GroupInfo, level: int, domain: int) -> dict[GroupInfo, tuple[int, int]]:
    """For each segment child of the group placed in (level, domain): the (segment level, domain)
    to try first. Empty when the group has no segment shape below its domain or the segments do not
    fit whole."""
    shape = group.segments
    if shape is None or shape.level <= level:
        return {}
    targets = _whole_first(state, shape, level, domain, _with_elastic(group))
    if targets is None:
        return {}
    # the first segments get the domains with room for their elastic pods (placed first, tree order)
    segments = [child for child in group.children if child.need_total == shape.size]
    return {child: (shape.level, target) for child, target in zip(segments, targets)}


def _whole_first(state: State, shape: SegmentShape, level: int, domain: int, whole: int) -> list[int] | None:
    """Segment domains for `shape.count` segments: as many as fit with room for their elastic pods too
    (`whole` pods each), then the rest with room for their minimum in what those leave. Allotting
    minimums only would pack them into the roomiest domain and send every elastic pod elsewhere."""
    pods = state.counts[shape.role][shape.level]
    if whole == shape.size:
        return _split(state, shape, pods // shape.size, level, domain, shape.count)

    def split(count: int) -> list[int] | None:
        first = _split(state, shape, pods // whole, level, domain, count) if count else []
        if first is None:
            return None
        left = pods - whole * np.bincount(np.array(first, dtype=np.int64), minlength=len(pods))
        rest = _split(state, shape, left // shape.size, level, domain, shape.count - count)
        return None if rest is None else first + rest

    inside = state.layout.ancestors(shape.level, level) == domain if level != ROOT else slice(None)
    most = min(shape.count, int((pods[inside] // whole).sum()))
    found = split(most)
    low, high = 0, most - 1          # else the most whole segments that leave room for the rest: bisect
    while found is None and low <= high:
        middle = (low + high + 1) // 2
        targets = split(middle)
        if targets is None:
            high = middle - 1
        else:
            found, low = targets, middle + 1
    return found


def _with_elastic(group: GroupInfo) -> int:
    """Pods of the largest segment, its elastic pods included."""
    return max(sum(len(ids) for _, ids in child.mandatory + child.optional) for child in group.children)


def _split(state: State, shape: SegmentShape, per_unit: np.ndarray, level: int, domain: int,
           count: int) -> list[int] | None:
    """`count` segment domains inside (level, domain): level by level top-down, the fewest domains
    that hold them all among those chosen one level up (pooled, so a domain of the level above is
    not filled for its own sake when two others hold the rest in fewer domains below). When that uses
    more domains at some level than the exact allotment of `fewest.py` (small trees only; it also weighs
    how each level's share is split between its domains), the exact one."""
    greedy = _best_fit_split(state, shape, per_unit, level, domain, count)
    exact = fewest_domains(state.layout, shape.level, per_unit, level, domain, count)
    if exact is None or greedy is not None and \
            _spans(state, shape.level, level, greedy) <= _spans(state, shape.level, level, exact):
        return greedy
    return exact


def _spans(state: State, unit_level: int, level: int, targets: list[int]) -> tuple[int, ...]:
    """Domains used at each level below `level` by segments in these segment-level domains."""
    units = np.array(targets, dtype=np.int64)
    return tuple(len(np.unique(state.layout.ancestors(unit_level, below)[units]))
                 for below in range(level + 1, unit_level + 1))


def _best_fit_split(state: State, shape: SegmentShape, per_unit: np.ndarray, level: int, domain: int,
                    count: int) -> list[int] | None:
    layout = state.layout
    chosen = np.array([domain], dtype=np.int64)
    for below in range(level + 1, shape.level + 1):
        owner_above = layout.ancestors(below, level) if level != ROOT else np.zeros(layout.size(below), np.int64)
        inside_chosen = np.isin(layout.ancestors(below, below - 1), chosen) if below - 1 > level else \
            owner_above == domain
        units = np.flatnonzero(inside_chosen)
        owner = layout.ancestors(shape.level, below)
        room = np.bincount(owner, weights=per_unit, minlength=layout.size(below)).astype(np.int64)[units]
        spans = lambda take, units=units, below=below: units_needed(state, shape, below, units, take)  # noqa: E731
        picked = best_fit(room, count, spans if below < shape.level else None)
        if picked is None:
            return None
        if below == shape.level:
            return [int(units[index]) for index, take in picked for _ in range(take)]
        chosen = units[[index for index, _ in picked]]
    return [domain] * count


def segment_room(shape: SegmentShape, pods: np.ndarray, owner: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per domain of a level (`owner`: each segment-level domain's domain of that level, `size` domains):
    the whole segments that fit, given `pods` of the shape's role per segment-level domain, and whether
    some segment-level domain has room for the short segment beside its whole ones."""
    room = np.bincount(owner, weights=pods // shape.size, minlength=size).astype(np.int64)
    spare = np.zeros(size, dtype=bool)
    if shape.short:
        spare[owner[pods % shape.size >= shape.short]] = True
    return room, spare


def holds_segments(shape: SegmentShape, room: np.ndarray, spare: np.ndarray) -> np.ndarray:
    """Which domains hold every segment: `count` whole ones, and the short one (in the room left beside
    whole segments somewhere, or in a place for one more whole segment)."""
    ok = room >= shape.count
    if shape.short:
        ok &= (room > shape.count) | spare
    return ok


def units_needed(state: State, shape: SegmentShape, level: int, domains: np.ndarray, count,
                 below: int | None = None) -> np.ndarray:
    """For each domain of `level`: the fewest domains of level `below` (default: the segment level)
    inside it that hold `count` segments (a large number when it cannot); `count` may also be an
    array, one count per domain. Below the segment level's parent this is a lower bound: it pools the
    room of each domain of `below` without asking how the levels between split it."""
    below = shape.level if below is None else below
    per_unit = state.counts[shape.role][shape.level] // shape.size
    if below != shape.level:
        per_unit = np.bincount(state.layout.ancestors(shape.level, below), weights=per_unit,
                               minlength=state.layout.size(below)).astype(np.int64)
    owner = state.layout.ancestors(below, level) if level != ROOT else np.zeros(len(per_unit), np.int64)
    order = np.lexsort([-per_unit, owner])
    owner, room = owner[order], per_unit[order]
    total = np.cumsum(room)
    starts = np.searchsorted(owner, owner)                 # first unit of each unit's domain
    before = np.where(starts > 0, total[np.maximum(starts - 1, 0)], 0)
    if np.ndim(count):
        wanted = np.zeros(state.layout.size(level) if level != ROOT else 1, dtype=np.int64)
        wanted[domains] = count
        count = wanted[owner]
    reached = (total - before) >= count
    rank = np.arange(len(owner)) - starts + 1
    needed = np.full(state.layout.size(level), 1 << 30, dtype=np.int64)
    np.minimum.at(needed, owner[reached], rank[reached])
    return needed[domains]


def best_fit(room: np.ndarray, count: int, spans=None) -> list[tuple[int, int]] | None:
    """(index, segments) taking `count` segments from domains with `room` each: the roomiest first (of
    equal room, the one holding it in the fewest segment-level domains), as long as none of the rest
    holds the remainder; then, of those that hold it, the one holding it
    in the fewest segment-level domains (`spans`), the tightest, the first in tree order. None when
    they do not fit."""
    if int(room.sum()) < count or count <= 0:
        return None if count > 0 else []
    keys = [np.arange(len(room))] + ([spans(room)] if spans is not None else []) + [-room]
    order = np.lexsort(keys)
    chosen: list[tuple[int, int]] = []
    used = np.zeros(len(room), dtype=bool)
    remaining = count
    for index in order.tolist():
        if remaining <= 0:
            break
        if used[index]:
            continue
        if room[index] >= remaining:
            holds = np.flatnonzero((room >= remaining) & ~used)
            keys = [holds, room[holds]] + ([spans(remaining)[holds]] if spans is not None else [])
            tightest = int(holds[np.lexsort(keys)[0]])
            chosen.append((tightest, remaining))
            return chosen
        chosen.append((index, int(room[index])))
        used[index] = True
        remaining -= int(room[index])
    return chosen if remaining <= 0 else None
