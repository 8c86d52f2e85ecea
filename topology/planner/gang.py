"""plan_gang: check the input, place the mandatory pods of the whole tree or refuse with the reason,
then the elastic pods, and report the plan."""
from __future__ import annotations

import sys

import numpy as np

from ..dra import WAITS_FOR
from ..plan import Plan, PlanInput
from .demand import GroupInfo, PlanError, analyse
from .explain import NEVER_FITS, Explainer, exclusion_text, insufficient
from .layout import ROOT, Layout, layout_for
from .place import Placer
from .policies import policy_named
from .rank import leaf_spans, placements, rank_of
from .shared import plan_shared
from .state import State

SEARCH_BUDGET = 256          # candidate tries before the search stops reconsidering placed groups
SMALL_GANG = 16              # gangs of at most this many pods search longer (each try is cheap)
SMALL_GANG_BUDGET = 2048


def plan_gang(inp: PlanInput) -> Plan:
    """Place a gang (see the package docstring); a refusal, never an exception, for bad input."""
    try:
        return _plan(inp, None)
    except PlanError as err:
        return Plan(placed=False, reason=str(err))


def evaluate_domain(inp: PlanInput, level: str | int, domain: str | int, free: np.ndarray | None = None) -> Plan:
    """The gang's plan confined to one domain (a level name or index, a domain id or index), with another
    free matrix if given: preemption asks this of each domain "as if the victims were gone"."""
    try:
        layout = layout_for(inp.topology, len(inp.node_names))
        level_index = _level(layout, level)
        domain_index = _domain(layout, level_index, domain)
        if free is not None:
            inp = _with_free(inp, free)
        return _plan(inp, (level_index, domain_index))
    except PlanError as err:
        return Plan(placed=False, reason=str(err))


def _level(layout: Layout, level: str | int) -> int:
    if isinstance(level, (int, np.integer)):
        if not ROOT <= level < layout.depth:
            raise PlanError(f"level {level} is not a level index (-1..{layout.depth - 1})")
        return int(level)
    if layout.tree is None:
        raise PlanError(f"level {level!r} needs a topology, but the gang names none")
    try:
        return layout.level_of(level)
    except ValueError as err:
        raise PlanError(str(err)) from None


def _domain(layout: Layout, level: int, domain: str | int) -> int:
    if isinstance(domain, (int, np.integer)):
        if not 0 <= domain < layout.size(level):
            raise PlanError(f"domain {domain} is not a domain index of level {layout.level_name(level)} "
                            f"(0..{layout.size(level) - 1})")
        return int(domain)
    if level == ROOT:
        return 0
    index = layout.tree.domain_index[level].get(domain)
    if index is None:
        raise PlanError(f"unknown {layout.level_name(level)} domain {domain!r}; valid: "
                        f"{', '.join(layout.tree.domain_ids[level][:20])}")
    return index


def _with_free(inp: PlanInput, free: np.ndarray) -> PlanInput:
    from dataclasses import replace
    return replace(inp, free=free)


_ANALYSES: dict[int, tuple] = {}      # id(tree) -> (tree, what it was analysed with, result)


def _analysed(inp: PlanInput, layout: Layout):
    """analyse(), kept between plans of the same tree object when the caller allows it."""
    if not inp.keep_analysis:
        return analyse(inp.tree, layout, inp.bound, inp.requests)
    key = (layout, frozenset(inp.bound.items()), frozenset(inp.requests))
    kept = _ANALYSES.get(id(inp.tree))
    if kept is not None and kept[0] is inp.tree and kept[1] == key:
        return kept[2]
    result = analyse(inp.tree, layout, inp.bound, inp.requests)
    if len(_ANALYSES) > 1024:
        _ANALYSES.clear()
    _ANALYSES[id(inp.tree)] = (inp.tree, key, result)
    return result


def _budget(inp: PlanInput, groups: int, slots: int) -> int:
    """Candidate tries before the search turns greedy: small gangs get a near-exhaustive search."""
    if inp.search_budget is not None:
        return inp.search_budget
    return (SMALL_GANG_BUDGET if slots <= SMALL_GANG else SEARCH_BUDGET) + 8 * groups


def _deep_enough(groups: int) -> None:
    """The backtracking search nests a few Python frames per group placed (no C stack on 3.11+)."""
    needed = 12 * groups + 1000
    if sys.getrecursionlimit() < needed:
        sys.setrecursionlimit(needed)


def _check(inp: PlanInput) -> None:
    try:
        policy_named(inp.strategy)
    except ValueError as error:
        raise PlanError(str(error)) from None
    nodes = len(inp.node_names)
    if inp.free.shape != (nodes, len(inp.resources)):
        raise PlanError(f"free matrix has shape {inp.free.shape}, expected ({nodes}, {len(inp.resources)})")
    if inp.topology is not None and len(inp.topology.node_names) != nodes:
        raise PlanError(f"topology {inp.topology.name!r} covers {len(inp.topology.node_names)} nodes, "
                        f"the plan input {nodes}")
    if inp.tree.strategy is not None:
        try:
            policy_named(inp.tree.strategy)
        except ValueError as error:
            raise PlanError(f"gang {inp.tree.key}: {error}") from None
    for slot, node in inp.bound.items():
        if not 0 <= node < nodes:
            raise PlanError(f"bound slot {slot} is on node index {node}, outside 0..{nodes - 1}")


def _plan(inp: PlanInput, scope: tuple[int, int] | None) -> Plan:
    """The plan; with unallocated claims the gang's pods share, on a node chosen for each (shared.py)."""
    if inp.shared:
        return plan_shared(inp, lambda trial: _plan_plain(trial, scope))
    return _plan_plain(inp, scope)


def _plan_plain(inp: PlanInput, scope: tuple[int, int] | None) -> Plan:
    """The plan; when siblings were allotted by exact packing, the plan without it if that places more
    pods in all (a domain packed for the most pods at home can leave fewer room elsewhere)."""
    plan = _plan_once(inp, scope, exact=True)
    if not plan.details.get("packed"):
        return plan
    greedy = _plan_once(inp, scope, exact=False)
    return plan if plan.placed and len(plan.slots) >= len(greedy.slots) else greedy


def _plan_once(inp: PlanInput, scope: tuple[int, int] | None, exact: bool) -> Plan:
    _check(inp)
    layout = layout_for(inp.topology, len(inp.node_names))
    usable = {role: (np.zeros(len(inp.node_names), dtype=bool) if role in inp.unplaceable
                     else inp.usable.get(role, np.ones(len(inp.node_names), dtype=bool)))
              for role in inp.requests}
    root, table = _analysed(inp, layout)
    state = State(layout, inp.free, inp.requests, usable, len(table.slots), inp.per_node, inp.one_per_domain,
                  links=inp.links)
    for slot_id, node in table.bound.items():
        state.add_bound(slot_id, node, table.slots[slot_id].role)
    policy = policy_named(inp.tree.strategy or inp.strategy)
    excluded_base = dict(inp.excluded)
    groups = sum(1 for _ in root.walk())
    explainer = Explainer(inp.resources, inp.occupied, inp.allocatable, inp.possible) if inp.explain else None
    placer = Placer(state, inp.occupied, policy, _budget(inp, groups, len(table.slots)), explainer, exact)
    _deep_enough(groups)
    scope_level, scope_domain = scope or (ROOT, 0)
    mandatory = root.need_total
    placer.hold_running(root)
    if not placer.place_group(root, scope_level, scope_domain):
        return _refusal(inp, placer, root, excluded_base)
    elastic = placer.place_elastic(root)
    node_of = state.node_of
    spans = leaf_spans(layout, [g for g in root.walk() if g.is_leaf and g.ids.size], node_of)
    placed_ids = np.flatnonzero(node_of >= 0).tolist()
    unplaced = [table.slots[i] for i in np.flatnonzero(node_of < 0).tolist()]
    plan = Plan(
        placed=True,
        slots={table.slots[i]: int(node) for i, node in zip(placed_ids, node_of[placed_ids].tolist())},
        groups=placements(layout, root, node_of, inp.node_names, spans),
        unplaced=unplaced,
        rank=rank_of(layout, state, root, placer.where.get(root, (ROOT, 0)), policy, placer.nodes_of,
                     spans),
        details={"mandatory": mandatory, "elastic": elastic, "bound": len(table.bound),
                 "candidates_tried": placer.tried, "search_exhausted": not placer.searching,
                 "strategy": policy.name, "packed": placer.packed},
    )
    if unplaced:
        plan.reason = _left_out_reason(unplaced)
    return plan


def _refusal(inp: PlanInput, placer: Placer, root: GroupInfo, excluded: dict[str, int]) -> Plan:
    parts = [f"role {role}: {why}" for role, why in sorted(inp.unplaceable.items()) if role in root.need]
    if parts and all(why.startswith(WAITS_FOR) for role, why in inp.unplaceable.items() if role in root.need):
        return Plan(placed=False, reason="; ".join(parts),
                    details={"mandatory": root.need_total, "never_fits": False, "waiting": True})
    failure = placer.failures.get(root, "the gang does not fit")
    details = {"mandatory": root.need_total, "candidates_tried": placer.tried,
               "search_exhausted": not placer.searching, "packed": placer.packed,
               "never_fits": bool(parts) or failure.startswith(NEVER_FITS)}
    if not inp.explain:
        return Plan(placed=False, reason="; ".join(parts + ["does not fit"]), details=details)
    parts.append(failure)
    roles = [role for role in root.need if role not in inp.unplaceable]
    fresh = State(placer.layout, inp.free, {r: inp.requests[r] for r in roles},
                  {r: placer.state.allowed[r] for r in roles})
    for reason, count in insufficient(fresh, inp.resources, roles).items():
        excluded[reason] = excluded.get(reason, 0) + count
    text = exclusion_text(excluded)
    if text:
        parts.append(text)
    return Plan(placed=False, reason="; ".join(parts), details=details | {"excluded": excluded})


def _left_out_reason(unplaced) -> str:
    roles = sorted({slot.role for slot in unplaced})
    return (f"{len(unplaced)} elastic pod{'s' if len(unplaced) != 1 else ''} ({', '.join(roles)}) left out: "
            f"no room for them inside the gang's required domains")
