"""Refusals that explain themselves: the binding constraint of the group that could not be placed
(`block b-2 fits 12 of 16 pods (8 nvidia.com/gpu each); segments of 4 at rack need 4 racks with room
for 4, found 3`) and how many nodes were left out and why."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..quantity import format_units
from ..resources import ResourceIndex
from .candidates import in_scope, pinned_domain, segment_room
from .demand import GroupInfo
from .layout import ROOT
from .state import State

PLAIN_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")


def describe_request(resources: ResourceIndex, request: np.ndarray) -> str:
    """The amounts that matter to a reader: extended resources (GPUs), else cpu and memory."""
    amounts = resources.as_dict(request)
    special = {name: v for name, v in amounts.items() if name not in PLAIN_RESOURCES}
    shown = special or {name: amounts[name] for name in ("cpu", "memory") if name in amounts}
    return ", ".join(f"{format_units(name, value)} {name}" for name, value in shown.items()) or "no resources"


class Explainer:
    """Called by the placer each time a group fails in every candidate domain."""

    def __init__(self, resources: ResourceIndex, occupied):
        self.resources = resources
        self.occupied = occupied

    def __call__(self, placer, group: GroupInfo, scope_level: int, scope_domain: int, ceiling: int) -> str:
        text = self._explain(placer, group, scope_level, scope_domain, ceiling)
        return text if group.parent is None else f"subgroup {group.name}: {text}"

    def _explain(self, placer, group: GroupInfo, scope_level: int, scope_domain: int, ceiling: int) -> str:
        state: State = placer.state
        layout = state.layout
        level = ceiling
        pinned = pinned_domain(layout, group, level)
        if pinned == -1:
            owners = layout.node_ancestor(group.pinned, level)
            count = np.unique(owners[owners >= 0]).size
            return (f"its running pods already span {count} {layout.level_plural(level)}, "
                    f"but it must stay in one {layout.level_name(level)}")
        domains = in_scope(layout, level, scope_level, scope_domain)
        if pinned is not None:
            domains = domains[domains == pinned]
        if group.claim is not None and level >= group.claim and self.occupied is not None and domains.size \
                and not group.pinned.size:
            free = ~self.occupied[group.claim][layout.ancestors(level, group.claim)[domains]]
            if not free.any():
                return (f"it is exclusive, and every {layout.level_name(group.claim)} that could hold it "
                        f"runs pods of other gangs")
            domains = domains[free]
        if not domains.size:
            return f"no {layout.level_name(level)} is available"
        needs = [(role, need) for role, need in group.need.items() if need]
        room = segment_room(state, group, level, domains)
        shape = group.segments
        fits = {role: np.minimum(state.count(role, level, domains), need) for role, need in needs}
        if room is not None and shape.role in fits:
            fits[shape.role] = np.minimum(fits[shape.role], room * shape.size
                                          + (group.need[shape.role] - shape.count * shape.size))
        score = sum((fits[role] for role, _ in needs), np.zeros(len(domains), dtype=np.int64))
        if room is not None:
            score = score + np.minimum(room, shape.count)
        best = int(np.argmax(score)) if len(domains) else 0
        domain = int(domains[best])
        place = "the cluster" if level == ROOT else f"{layout.level_name(level)} {layout.domain_value(level, domain)}"
        several = len(needs) > 1
        parts = [f"{int(fits[role][best])} of {need} {role + ' ' if several else ''}pods "
                 f"({describe_request(self.resources, state.request[role])} each)" for role, need in needs]
        text = f"{place} fits " + " and ".join(parts) if parts else f"{place} has nothing to place"
        short = any(int(fits[role][best]) < need for role, need in needs)
        if room is not None:
            found = int(room[best])
            places = layout.level_plural(shape.level) if shape.count != 1 else layout.level_name(shape.level)
            text += (f"; segments of {shape.size} at {layout.level_name(shape.level)} need {shape.count} "
                     f"{places} with room for {shape.size}, found {found}")
            short = short or found < shape.count
        if short:
            return text
        where = "" if level == ROOT else f" in the {layout.level_plural(level)} tried"
        return f"{text}, but {self._inner_reason(placer, group, where)}"

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
