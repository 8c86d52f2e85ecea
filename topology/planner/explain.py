"""Refusals that explain themselves: the best domain with the joint count of the whole group (all roles
and segments together), the first constraint that breaks (`block b-2 fits 12 of 16 pods (8
nvidia.com/gpu each); segments of 4 at rack need 4 racks with room for 4, found 3`), "can never fit in
this cluster" when even empty domains are too small, and how many nodes were left out and why."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..quantity import format_units
from ..resources import ResourceIndex
from .candidates import group_segment_room, in_scope, pinned_domain
from .demand import GroupInfo, SegmentShape
from .layout import ROOT, Layout
from .segments import holds_segments, segment_room
from .state import FIT_CAP, State

PLAIN_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")
NEVER_FITS = "can never fit in this cluster"


def describe_request(resources: ResourceIndex, request: np.ndarray) -> str:
    """The amounts that matter to a reader: extended resources (GPUs), else cpu and memory."""
    amounts = resources.as_dict(request)
    special = {name: v for name, v in amounts.items() if name not in PLAIN_RESOURCES}
    shown = special or {name: amounts[name] for name in ("cpu", "memory") if name in amounts}
    return ", ".join(f"{format_units(name, value)} {name}" for name, value in shown.items()) or "no resources"


@dataclass
class JointFit:
    """Per domain of one level: the group's mandatory pods that fit there together."""

    pods: np.ndarray                     # all roles together
    by_role: dict[str, np.ndarray]
    room: np.ndarray | None              # whole segments (None: no required segment shape below)
    spare: np.ndarray | None = None      # room for the short segment beside whole ones
    loose: np.ndarray | None = None      # all roles together, the segmented one counted as loose pods

    def fits(self, need: int, shape: SegmentShape | None) -> np.ndarray:
        ok = self.pods >= need
        return ok if self.room is None else ok & holds_segments(shape, self.room, self.spare)

    def best(self, domains: np.ndarray, shape: SegmentShape | None) -> int:
        """The domain among `domains` closest to holding the group: most pods, then most segments."""
        score = self.pods if self.room is None else self.pods + np.minimum(self.room, shape.count)
        return int(domains[int(np.argmax(score[domains]))])


def joint_fit(layout: Layout, level: int, free: np.ndarray, requests: Mapping[str, np.ndarray],
              allowed: Mapping[str, np.ndarray], needs: Mapping[str, int],
              shape: SegmentShape | None = None, scope: tuple[int, int] = (ROOT, 0)) -> JointFit:
    """How many of `needs` (role -> pods) fit together in each domain of `level`: roles one after the
    other, the largest pods first, each taking nodes in order and leaving the rest to the next; the
    role of a required segment shape last, counted in whole segments of its level. A lower bound on the
    exact packing, exact for pods that take whole nodes. Only nodes inside the `scope` domain count."""
    free = np.array(free, dtype=np.int64, copy=True)
    owner = _owners(layout, level, scope)
    size = layout.size(level)
    segmented = shape.role if shape is not None and shape.hard and shape.level > level else None
    by_role: dict[str, np.ndarray] = {}
    room = None
    for role in _largest_first(free, requests, [r for r in needs if r != segmented]):
        fit = _fit(free, requests[role], allowed[role])
        take = _take(fit, owner, needs[role])
        free -= take[:, None] * requests[role][None, :]
        by_role[role] = np.bincount(owner[owner >= 0], weights=take[owner >= 0], minlength=size).astype(np.int64)
    if segmented is not None:
        fit = _fit(free, requests[segmented], allowed[segmented])
        member = owner >= 0
        pods = np.bincount(layout.node_domain[shape.level][member], weights=fit[member],
                           minlength=layout.size(shape.level)).astype(np.int64)
        room, spare = segment_room(shape, pods, layout.ancestors(shape.level, level) if level != ROOT
                                   else np.zeros(pods.size, dtype=np.int64), size)
        total = np.bincount(owner[member], weights=fit[member], minlength=size).astype(np.int64)
        rest = needs[segmented] - shape.count * shape.size
        by_role[segmented] = np.minimum(np.minimum(room, shape.count) * shape.size + rest,
                                        np.minimum(total, needs[segmented]))
        loose = sum((by_role[r] for r in needs if r != segmented), np.minimum(total, needs[segmented]))
    return JointFit(sum(by_role.values(), np.zeros(size, dtype=np.int64)), {role: by_role[role] for role in needs},
                    room, spare if segmented is not None else None, loose if segmented is not None else None)


def _owners(layout: Layout, level: int, scope: tuple[int, int]) -> np.ndarray:
    """Each node's domain of `level`; -1 outside the topology or the scope domain."""
    owner = np.where(layout.member, layout.ancestors(layout.depth, level), -1)
    if scope[0] == ROOT:
        return owner
    inside = np.full(layout.node_count, -1, dtype=np.int64)
    nodes = layout.inside(scope[0], scope[1], layout.depth)
    inside[nodes] = owner[nodes]
    return inside


def _largest_first(free: np.ndarray, requests: Mapping[str, np.ndarray], roles: list[str]) -> list[str]:
    scale = np.maximum(free.max(axis=0, initial=0), 1)
    return sorted(roles, key=lambda role: (-float((requests[role] / scale).max(initial=0)), role))


def _fit(free: np.ndarray, request: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    columns = np.flatnonzero(request > 0)
    if columns.size == 0:
        fit = np.full(len(free), FIT_CAP, dtype=np.int64)
    else:
        fit = np.minimum((np.maximum(free[:, columns], 0) // request[columns]).min(axis=1), FIT_CAP)
    return np.where(allowed, fit, 0)


def _take(fit: np.ndarray, owner: np.ndarray, need: int) -> np.ndarray:
    """Pods taken per node: each domain's nodes in order until `need` pods are placed in it."""
    take = np.zeros_like(fit)
    nodes = np.flatnonzero((owner >= 0) & (fit > 0))
    if not nodes.size or need <= 0:
        return take
    nodes = nodes[np.argsort(owner[nodes], kind="stable")]
    domain, counts = owner[nodes], fit[nodes]
    total = np.cumsum(counts)
    starts = np.flatnonzero(np.r_[True, domain[1:] != domain[:-1]])
    before = total - counts - np.repeat(total[starts] - counts[starts], np.diff(np.r_[starts, nodes.size]))
    take[nodes] = np.clip(need - before, 0, counts)
    return take


class Explainer:
    """Called by the placer each time a group fails in every candidate domain."""

    def __init__(self, resources: ResourceIndex, occupied, allocatable: np.ndarray | None = None,
                 possible: Mapping[str, np.ndarray] | None = None):
        self.resources = resources
        self.occupied = occupied
        self.allocatable = allocatable
        self.possible = possible        # role -> nodes its own rules allow (this attempt's candidates aside)

    def __call__(self, placer, group: GroupInfo, scope_level: int, scope_domain: int, ceiling: int) -> str:
        text = self._explain(placer, group, scope_level, scope_domain, ceiling)
        return text if group.parent is None else f"subgroup {group.name}: {text}"

    def _explain(self, placer, group: GroupInfo, scope_level: int, scope_domain: int, ceiling: int) -> str:
        state: State = placer.state
        layout = state.layout
        level, shape = ceiling, group.segments
        needs = {role: need for role, need in group.need.items() if need}
        if shape is not None and not shape.hard:
            shape = None                    # a preferred level never refuses a gang
        if shape is not None and shape.count == 1 and not shape.short and set(needs) == {shape.role} and shape.level > level:
            level, shape = shape.level, None     # one segment holds every pod: its level is the group's
        pinned = pinned_domain(layout, group, level)
        if pinned == -1:
            owners = layout.node_ancestor(group.pinned, level)
            count = np.unique(owners[owners >= 0]).size
            return (f"its running pods already span {count} {layout.level_plural(level)}, "
                    f"but it must stay in one {layout.level_name(level)}")
        domains = in_scope(layout, level, scope_level, scope_domain)
        if pinned is not None:
            domains = domains[domains == pinned]
        if not domains.size:
            return f"no {layout.level_name(level)} is available"
        need = sum(needs.values())
        never = self._never(state, group, level, domains, needs, shape, scope_level)
        if never:
            return never
        allowed = {role: state.allowed[role] & ~state.blocked for role in needs}
        joint = joint_fit(layout, level, state.free, state.request, allowed, needs, shape,
                          (scope_level, scope_domain))
        if group.claim is not None and level >= group.claim and self.occupied is not None \
                and not group.pinned.size:
            free = ~self.occupied[group.claim][layout.ancestors(level, group.claim)[domains]]
            if not free.any():
                return (f"it is exclusive, and every {layout.level_name(group.claim)} that could hold it "
                        f"runs pods of other gangs")
            domains = domains[free]
        best = joint.best(domains, shape)
        text = self._describe(state, level, best, joint, needs, shape, "fits")
        if not joint.fits(need, shape)[best]:
            return text
        below = self._segments_below(placer, group, level, best)
        if below:                           # what fails is below: say it alone, where it fails
            place = self._place(state, level, best)
            return below if f": {place} " in below else f"in {place}, {below}"
        where = "" if level == ROOT else f" in the {layout.level_plural(level)} tried"
        inner = self._inner_reason(placer, group, where)
        if inner.startswith("subgroup ") and f": {self._place(state, level, best)} " in inner:
            return inner                    # the subgroup fails in this same domain: its reason alone
        return f"{text}, but {inner}"

    def _segments_below(self, placer, group: GroupInfo, level: int, domain: int) -> str:
        """Why a descendant's required segments do not fit in the domain, "" when they do."""
        for below in group.segmented_below:
            held = group_segment_room(placer.state, below, level, np.array([domain]))
            if held is not None and not held[1][0]:
                ceiling = level if below.required is None else max(level, below.required)
                return self(placer, below, level, domain, ceiling)
        return ""

    def _never(self, state: State, group: GroupInfo, level: int, domains: np.ndarray, needs: dict[str, int],
               shape: SegmentShape | None, scope_level: int) -> str | None:
        """Said only where the whole cluster is in scope: no domain holds the group even when empty, on every
        node its own rules allow. Not on the candidates alone: kube-scheduler offers only the nodes with room
        now, and the others may free up (refusing those as "never" would contradict "N not a candidate")."""
        if self.allocatable is None or scope_level != ROOT or not needs:
            return None
        allowed = {role: self.possible[role] if self.possible and role in self.possible else state.allowed[role]
                   for role in needs}
        joint = joint_fit(state.layout, level, self.allocatable, state.request, allowed, needs, shape)
        if joint.fits(sum(needs.values()), shape)[domains].any():
            return None
        text = self._describe(state, level, joint.best(domains, shape), joint, needs, shape, "holds")
        return f"{NEVER_FITS}: even when empty, {text}"

    @staticmethod
    def _place(state: State, level: int, domain: int) -> str:
        layout = state.layout
        return "the cluster" if level == ROOT else f"{layout.level_name(level)} {layout.domain_value(level, domain)}"

    def _describe(self, state: State, level: int, domain: int, joint: JointFit, needs: dict[str, int],
                  shape: SegmentShape | None, verb: str) -> str:
        """One sentence naming the constraint that fails: too few pods fit (`block b fits 6 of 8 pods ...`),
        or they all fit but not in whole segments (`... has room for all 8 pods ..., but not in segments
        of 4 at rack: ...`); never a count of pods in whole segments that reads as a smaller room."""
        layout = state.layout
        place = self._place(state, level, domain)
        need = sum(needs.values())
        if not needs:
            return f"{place} has nothing to place"
        pods = int(joint.pods[domain] if joint.loose is None else joint.loose[domain])
        if len(needs) == 1:
            (role,) = needs
            what = f"pods ({self._each(state, role)})"
        else:
            what = "pods together (" + "; ".join(
                f"{role} {int(joint.by_role[role][domain])} of {n}, {self._each(state, role)}"
                for role, n in needs.items()) + ")"
        if joint.room is None:
            return f"{place} {verb} {pods} of {need} {what}"
        places = layout.level_plural(shape.level) if shape.count != 1 else layout.level_name(shape.level)
        segments = f"segments of {shape.size} at {layout.level_name(shape.level)}"
        racks = f"{shape.count} {places} with room for {shape.size}"
        if shape.short:
            racks += f" and room for {shape.short} more"
        racks += f", found {int(joint.room[domain])}"
        if shape.short and joint.room[domain] >= shape.count:
            racks += f" with no room for {shape.short} more"
        if pods < need:
            return f"{place} {verb} {pods} of {need} {what}; {segments} need {racks}"
        room = "has room for" if verb == "fits" else verb
        return f"{place} {room} all {need} {what}, but not in {segments}: they need {racks}"

    def _each(self, state: State, role: str) -> str:
        return f"{describe_request(self.resources, state.request[role])} each"

    @staticmethod
    def _inner_reason(placer, group: GroupInfo, where: str) -> str:
        failed = [placer.failures[child] for child in group.children if child in placer.failures]
        if failed:
            if group.k < len(group.children):
                return f"fewer than {group.k} of its {len(group.children)} subgroups fit together; {failed[-1]}"
            return failed[-1]
        if group.claim is not None:
            return "the domains with room already hold other pods of this gang (it is exclusive)"
        roles = sorted(group.need)
        if len(roles) > 1:
            return f"roles {', '.join(roles)} do not fit together{where}"
        return f"its subgroups do not fit together{where}" if group.children else f"the pods do not fit{where}"


def exclusion_text(excluded: Mapping[str, int]) -> str:
    if not excluded:
        return ""
    parts = [f"{count} {reason}" for reason, count in sorted(excluded.items(), key=lambda kv: (-kv[1], kv[0]))]
    return "nodes excluded: " + ", ".join(parts)


def insufficient(state: State, resources: ResourceIndex, roles) -> dict[str, int]:
    """Usable nodes that cannot hold even one pod of a role, counted per resource that is short."""
    counts: dict[str, int] = {}
    for role in roles:
        request = state.request[role]
        nodes = np.flatnonzero(state.allowed[role] & (state.fit[role] == 0))
        if not nodes.size:
            continue
        for column in np.flatnonzero(request > 0):
            short = int((state.free[nodes, column] < request[column]).sum())
            if short:
                reason = f"insufficient {resources.names[column]}"
                counts[reason] = max(counts.get(reason, 0), short)
    return counts
