"""select_victims: the cheapest domain, and the victims in it, that let a gang's whole plan fit.

The domains tried are those of the gang's required level or, without one, its preferred ladder: the
preferred level first, then each coarser level up to the whole cluster. In each domain the victims are
the lower-priority pods inside it; the planner is asked to place the gang confined to that domain with
the victims' capacity given back. Small domains are searched exhaustively in cost order (so the choice
is the cheapest there is), larger ones greedily: spare pods first, then whole gangs, lowest priority
first, and every victim the plan turns out not to need is spared again. A cheap count (do the
mandatory pods fit by capacity at all?) screens each choice before the planner sees it.

Exclusive groups: given the pods of other gangs per node (`occupied_count`), each choice is evaluated
with the occupancy its victims leave behind, so an exclusive domain is one emptied of every other gang
(all of them victims) or not chosen at all.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..plan import Plan, PlanInput
from ..planner import PlanError, evaluate_domain, occupied_masks
from ..tree import LevelError
from .candidates import (Choice, GangInDomain, RunningGang, Victim, candidate_gangs, freed, gangs_in_domain,
                         victims_of)
from .cost import Cost, cost_of
from .domains import ROOT, Demand, Domains

EXACT_LIMIT = 4096          # choices per domain searched exhaustively; above, the greedy search
MAX_DOMAINS = 16            # domains evaluated per level (the most promising by capacity)
BUDGET = 400                # planner calls per selection
SECONDS = 2.0               # time bound per selection (kube-scheduler's extender timeout is 5 s)


@dataclass
class DomainOutcome:
    level: str
    domain: str
    fits: bool = False
    cost: Cost | None = None
    note: str = ""

    def to_json(self) -> dict:
        return {"level": self.level, "domain": self.domain, "fits": self.fits, "note": self.note,
                "cost": None if self.cost is None else {"priority": self.cost.priority, "gangs": self.cost.gangs,
                                                        "units": self.cost.units, "pods": self.cost.pods}}


@dataclass
class PreemptionPlan:
    found: bool
    plan: Plan | None = None                     # the preemptor's plan once the victims are gone
    victims: list[Victim] = field(default_factory=list)
    level: str | None = None                     # the chosen domain's level ("cluster" for the whole)
    domain: str | None = None                    # its domain id
    cost: Cost | None = None
    explanation: str = ""                        # why that domain (or, when not found, why none)
    outcomes: list[DomainOutcome] = field(default_factory=list)
    free: np.ndarray | None = None               # the free matrix with the victims gone
    advice: str = ""                             # when not found: what would make it fit beyond its priority

    @property
    def reason(self) -> str:
        return self.explanation

    @property
    def broken_gangs(self) -> list[str]:
        return sorted({v.gang for v in self.victims if v.whole})

    @property
    def gangs(self) -> list[str]:
        return sorted({v.gang for v in self.victims})

    def to_json(self, node_names: Sequence[str] | None = None) -> dict:
        def node(index: int):
            return node_names[index] if node_names is not None else index
        return {"found": self.found, "level": self.level, "domain": self.domain,
                "explanation": self.explanation,
                "victims": [{"pod": v.pod, "gang": v.gang, "priority": v.priority, "node": node(v.node),
                             "whole_gang": v.whole} for v in self.victims],
                "cost": None if self.cost is None else {"priority": self.cost.priority, "gangs": self.cost.gangs,
                                                        "units": self.cost.units, "pods": self.cost.pods},
                "domains": [o.to_json() for o in self.outcomes]}


def select_victims(inp: PlanInput, running: Iterable[RunningGang], *, priority: int | None = None,
                   policy: str | None = None, protected: Iterable[str] = (), avoid: Iterable[str] = (),
                   budget: int = BUDGET, occupied_count: np.ndarray | None = None,
                   seconds: float | None = SECONDS, refused: bool = False,
                   on_step: Callable[[], None] | None = None) -> PreemptionPlan:
    """The cheapest preemption that lets the gang of `inp` fit (see the module docstring). `priority` and
    `policy` default to the gang's own; `protected` gangs are never victims; `avoid` lists domain ids
    not to choose (an eviction there was refused). `occupied_count`: per node, the pods (and
    reservations) of everything but this gang; for a gang with exclusive groups it replaces
    `inp.occupied`, minus the victims of each choice (None: `inp.occupied` as given, victims or not).
    `seconds` bounds the search in time like `budget` bounds its planner calls (None: no bound); the
    search is skipped at once where no candidate victim runs on a node the gang could use and the caller
    knows the gang does not fit as things are (`refused`: the planner refused it), and after one plan
    where it does not fit even with every candidate victim gone. `on_step` is called after each planner
    call (a caller searching in a thread uses it to give others their turn)."""
    tree = inp.tree
    priority = tree.priority if priority is None else priority
    policy = tree.preemption_policy if policy is None else policy
    if policy == "Never":
        return PreemptionPlan(False, explanation=f"gang {tree.key} has preemptionPolicy Never: it never preempts")
    try:
        search = _Search(inp, budget, occupied_count, seconds, on_step)
    except (PlanError, LevelError, ValueError) as err:
        return PreemptionPlan(False, explanation=str(err))
    gangs = candidate_gangs(running, priority, own=tree.key, protected=protected)
    if refused and not search.could_help(gangs):
        return PreemptionPlan(False, explanation=f"no running pod of a priority lower than {priority} on a node "
                                                 f"the gang could use: no preemption can help")
    if refused and gangs and not search.fits_with_all_gone(gangs):
        pods = sum(len(gang.pods) for gang in gangs)
        return PreemptionPlan(False, explanation=f"the gang does not fit even with all {pods} running pods of a "
                                                 f"priority lower than {priority} gone: no preemption can help")
    result = search.run(gangs, set(avoid))
    if not result.found and not gangs:
        result.explanation = f"no running pod has a priority lower than {priority}"
    return result


class _Search:
    def __init__(self, inp: PlanInput, budget: int, occupied_count: np.ndarray | None = None,
                 seconds: float | None = None, on_step: Callable[[], None] | None = None):
        self.inp = inp
        self.layout = Domains(inp.topology, len(inp.node_names))
        self.root = Demand.of(inp.tree, self.layout, inp.bound)
        exclusive = inp.topology is not None and any(g.exclusive for g in inp.tree.groups())
        # other gangs' pods per node, when exclusivity depends on who is evicted (None: inp.occupied holds)
        self.others = (np.asarray(occupied_count, dtype=np.int64) if exclusive and occupied_count is not None
                       else None)
        root = inp.tree.root
        self.claim = (self.root.required if self.root.required is not None else self.root.preferred) \
            if root.exclusive else None
        for role in self.root.need:
            if role not in inp.requests:
                raise PlanError(f"gang {inp.tree.key}: role {role!r} has no request; known roles: "
                                f"{', '.join(sorted(inp.requests)) or 'none'}")
        self.budget = budget
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.on_step = on_step
        nodes = len(inp.node_names)
        self.usable = {role: (np.zeros(nodes, dtype=bool) if role in inp.unplaceable
                              else np.asarray(inp.usable.get(role, np.ones(nodes, dtype=bool)), dtype=bool))
                       & self.layout.member for role in inp.requests}
        self.outcomes: list[DomainOutcome] = []
        names = list(inp.resources.names)            # fewest evicted GPUs (cpu without GPUs) after gangs broken
        self.unit = names.index("nvidia.com/gpu") if "nvidia.com/gpu" in names else \
            (names.index("cpu") if "cpu" in names else None)

    # --- the whole search ----------------------------------------------------------------------------
    def could_help(self, gangs: list[RunningGang]) -> bool:
        """Some candidate victim runs where evicting it could matter: on a node the gang could use, or,
        for an exclusive gang (whose domain must be emptied), anywhere in the topology."""
        where = self.layout.member if self.others is not None else np.logical_or.reduce(
            list(self.usable.values()) or [np.zeros(len(self.inp.node_names), dtype=bool)])
        nodes = np.fromiter((pod.node for gang in gangs for pod in gang.pods.values()), dtype=np.int64)
        return bool(nodes.size and where[nodes].any())

    def fits_with_all_gone(self, gangs: list[RunningGang]) -> bool:
        """One planner call over the whole cluster with every candidate victim gone. Evicting fewer never
        frees more (capacity, or for an exclusive gang, occupied domains), and every domain the search
        tries lies inside the cluster: when this fails, every choice fails, so a refused gang whose
        victims cannot help pays for one plan instead of two per domain on each level."""
        everyone = [Choice(gang, tuple(sorted(gang.pods)), True) for gang in gangs]
        return self.evaluate(ROOT, 0, self.layout.member, everyone) is not None

    def spent(self) -> bool:
        return self.budget <= 0 or (self.deadline is not None and time.monotonic() > self.deadline)

    def run(self, gangs: list[RunningGang], avoid: set[str]) -> PreemptionPlan:
        best: tuple[Cost, int, int, list[Choice], Plan] | None = None
        for position, level in enumerate(self.ladder()):
            for domain, in_domain, here in self.screened(level, gangs, avoid):
                if self.spent():
                    self.note(level, domain, "not evaluated: the evaluation budget or time bound is spent")
                    continue
                # a coarser level must do strictly better on victims; the same level may win on placement
                bound = None if best is None else (best[0].victims, best[1] == position)
                found = self.search(level, domain, in_domain, here, bound)
                if found is None:
                    continue
                cost, choices, plan = found
                if best is None or cost < best[0]:
                    best = (cost, position, domain, choices, plan)
        if best is None:
            return PreemptionPlan(False, explanation=self.refusal(), outcomes=self.outcomes)
        cost, position, domain, choices, plan = best
        level = self.ladder()[position]
        return PreemptionPlan(True, plan, victims_of(choices), self.layout.level_name(level),
                              self.layout.domain_id(level, domain), cost,
                              self.explain(level, domain, choices, cost), self.outcomes,
                              freed(self.inp.free, choices))

    def ladder(self) -> list[int]:
        """The levels whose domains may hold the whole gang, finest first."""
        required, preferred = self.root.required, self.root.preferred
        if required is not None:
            start = preferred if preferred is not None else required
            return list(range(start, required - 1, -1))
        if preferred is not None:
            return list(range(preferred, -1, -1)) + [ROOT]
        return [ROOT]

    def screened(self, level: int, gangs: list[RunningGang], avoid: set[str]):
        """The domains of `level` where the gang could fit with every candidate victim gone, most
        promising first (the smallest shortfall), at most MAX_DOMAINS."""
        layout = self.layout
        owners = layout.owners(level)
        touching: dict[int, list[RunningGang]] = {}
        for gang in gangs:
            for domain in sorted({int(owners[pod.node]) for pod in gang.pods.values()} - {-1}):
                touching.setdefault(domain, []).append(gang)
        promising = []
        for domain in range(layout.size(level)):
            name = layout.domain_id(level, domain)
            if name in avoid:
                self.note(level, domain, "avoided: an eviction there was refused")
                continue
            in_domain = (owners == domain) & layout.member
            here = gangs_in_domain(touching.get(domain, []), in_domain)
            if level == self.claim and self.stays_occupied(in_domain, here):
                self.note(level, domain, "the gang is exclusive, and pods of other gangs there may not be evicted")
                continue
            shortfall = self.shortfall(self.inp.free, in_domain)
            if shortfall and not here:
                self.note(level, domain, "no lower-priority pods there")
                continue
            if shortfall and self.shortfall(freed(self.inp.free, [g.whole() for g in here]), in_domain):
                pods = sum(len(g.inside) for g in here)
                self.note(level, domain, f"does not fit even with all {pods} lower-priority pods there gone")
                continue
            promising.append((shortfall, domain, in_domain, here))
        promising.sort(key=lambda item: item[:2])
        for _, domain, _, _ in promising[MAX_DOMAINS:]:
            self.note(level, domain, f"not evaluated: only the {MAX_DOMAINS} most promising domains are")
        return [(domain, in_domain, here) for _, domain, in_domain, here in promising[:MAX_DOMAINS]]

    def remaining_others(self, choices: Iterable[Choice]) -> np.ndarray:
        """Per node, the other gangs' pods still there once the chosen victims are gone."""
        left = self.others.copy()
        for choice in choices:
            for key in choice.pods:
                left[choice.gang.pods[key].node] -= 1
        return left

    def stays_occupied(self, in_domain: np.ndarray, here: list[GangInDomain]) -> bool:
        """The gang's exclusive domain keeps other pods even with every candidate victim in it gone."""
        if self.others is None or self.inp.bound:       # running pods pin the gang: the planner skips the check
            return False
        inside = [Choice(g.gang, g.inside) for g in here]
        return bool((self.remaining_others(inside)[in_domain] > 0).any())

    def with_victims_gone(self, choices: Sequence[Choice]) -> PlanInput:
        if self.others is None:
            return self.inp
        return replace(self.inp, occupied=occupied_masks(self.inp.topology, self.remaining_others(choices) > 0))

    def shortfall(self, free: np.ndarray, in_domain: np.ndarray) -> int:
        """Mandatory pods that do not fit in the domain by capacity alone (a necessary condition)."""
        missing = 0
        for role, need in self.root.need.items():
            if need <= 0:
                continue
            request = self.inp.requests[role]
            columns = np.flatnonzero(request > 0)
            mask = self.usable[role] & in_domain
            if not columns.size:
                fit = need if mask.any() else 0
            else:
                fit = int((np.maximum(free[np.ix_(mask, columns)], 0) // request[columns]).min(axis=1).sum())
            missing += max(0, need - fit)
        return missing

    # --- one domain ------------------------------------------------------------------------------------
    def search(self, level: int, domain: int, in_domain: np.ndarray, here: list[GangInDomain], bound):
        options = [g.options(EXACT_LIMIT) for g in here]
        size = 1
        for found in options:
            size = size * len(found) if found is not None and size <= EXACT_LIMIT else EXACT_LIMIT + 1
        if size <= EXACT_LIMIT:
            result = self.exact(level, domain, in_domain, options, bound)
        else:
            result = self.greedy(level, domain, in_domain, here, bound)
        if result is None:
            if bound is not None:
                self.note(level, domain, "no choice of victims there is cheaper than the one found")
            else:
                self.note(level, domain, "the plan does not fit with any choice of victims tried")
        else:
            self.note(level, domain, f"fits: {result[0].describe()}", result[0])
        return result

    def evaluate(self, level: int, domain: int, in_domain: np.ndarray, choices: Sequence[Choice]) -> Plan | None:
        free = freed(self.inp.free, choices)
        if self.shortfall(free, in_domain) or self.spent():
            return None
        self.budget -= 1
        plan = evaluate_domain(self.with_victims_gone(choices), level, domain, free)
        if self.on_step is not None:
            self.on_step()
        return plan if plan.placed else None

    def exact(self, level, domain, in_domain, options, bound):
        """Every choice in cost order; the first that fits sets the victims' cost, the plan rank breaks ties."""
        ranked = []
        for number, combo in enumerate(itertools.product(*options)):
            key = cost_of(combo, column=self.unit).victims
            if bound is not None and (key > bound[0] or (key == bound[0] and not bound[1])):
                continue
            ranked.append((key, number, combo))
        ranked.sort(key=lambda item: item[:2])
        best = None
        for key, _, combo in ranked:
            if best is not None and key > best[0].victims:
                break
            plan = self.evaluate(level, domain, in_domain, combo)
            if plan is None:
                continue
            cost = cost_of(combo, plan.rank, self.unit)
            if best is None or cost < best[0]:
                best = (cost, [c for c in combo if not c.empty], plan)
        return best

    def greedy(self, level, domain, in_domain, here: list[GangInDomain], bound):
        """Lowest priorities first: spare pods, then whole gangs until the plan fits; then spare again
        every victim the plan does not need."""
        plan = self.evaluate(level, domain, in_domain, [])
        if plan is not None:
            return cost_of([], plan.rank, self.unit), [], plan
        for cap in sorted({g.gang.priority for g in here}):
            pool = [g for g in here if g.gang.priority <= cap]
            if self.evaluate(level, domain, in_domain, [g.whole() for g in pool]) is None:
                continue
            chosen = {id(g): g.most_spare() for g in pool if g.spare}
            plan = self.evaluate(level, domain, in_domain, list(chosen.values()))
            added = []
            order = sorted(pool, key=lambda g: (g.gang.priority, len(g.gang.pods), -len(g.inside), g.gang.key))
            for g in order:
                if plan is not None:
                    break
                chosen[id(g)] = g.whole()
                added.append(g)
                plan = self.evaluate(level, domain, in_domain, list(chosen.values()))
            if plan is None:
                continue
            if self.others is None:
                chosen = self.trim(chosen, plan)
            else:                                   # sparing by capacity alone may break an exclusive claim
                trimmed = self.trim(chosen, plan)
                found = self.evaluate(level, domain, in_domain, list(trimmed.values()))
                if found is not None:
                    chosen, plan = trimmed, found
            for g in reversed(added):               # spare whole gangs the plan does not need
                if not chosen[id(g)].whole:         # trim spared it already: offering it again only costs
                    continue
                trial = dict(chosen)
                trial[id(g)] = g.most_spare() if g.spare else Choice(g.gang)
                found = self.evaluate(level, domain, in_domain, list(trial.values()))
                if found is not None:
                    chosen, plan = trial, found
            for g in pool:                          # and spare pods, one at a time
                current = chosen.get(id(g))
                if current is None or current.whole:
                    continue
                for key in reversed(current.pods):
                    trial = dict(chosen)
                    trial[id(g)] = Choice(g.gang, tuple(k for k in chosen[id(g)].pods if k != key))
                    found = self.evaluate(level, domain, in_domain, list(trial.values()))
                    if found is not None:
                        chosen, plan = trial, found
            choices = [c for c in chosen.values() if not c.empty]
            cost = cost_of(choices, plan.rank, self.unit)
            if bound is not None and (cost.victims > bound[0] or (cost.victims == bound[0] and not bound[1])):
                return None
            return cost, choices, plan
        return None

    def trim(self, chosen: dict, plan: Plan) -> dict:
        """Spare, without asking the planner again, every victim whose capacity this plan does not use:
        whole gangs first, then spare pods one by one."""
        usage = np.zeros_like(self.inp.free)
        for slot, node in plan.slots.items():
            if slot not in self.inp.bound:
                usage[node] += self.inp.requests[slot.role]
        used = usage.any(axis=1)
        free = freed(self.inp.free, chosen.values())

        def without(pods, gang) -> np.ndarray | None:
            trial = free.copy()
            for key in pods:
                trial[gang.pods[key].node] -= gang.pods[key].request
            return trial if (trial[used] >= usage[used]).all() else None

        result = dict(chosen)
        for key, choice in sorted(chosen.items(), key=lambda kv: (not kv[1].whole, kv[1].gang.key)):
            if choice.whole:
                trial = without(choice.pods, choice.gang)
                if trial is not None:
                    free, result[key] = trial, Choice(choice.gang)
                continue
            kept = list(choice.pods)
            for pod in reversed(choice.pods):
                trial = without([pod], choice.gang)
                if trial is not None:
                    free = trial
                    kept.remove(pod)
            result[key] = Choice(choice.gang, tuple(kept))
        return result

    # --- words -----------------------------------------------------------------------------------------
    def place(self, level: int, domain: int) -> str:
        if level == ROOT:
            return "the cluster"
        return f"{self.layout.level_name(level)} {self.layout.domain_value(level, domain)}"

    def note(self, level: int, domain: int, text: str, cost: Cost | None = None) -> None:
        self.outcomes.append(DomainOutcome(self.layout.level_name(level), self.layout.domain_id(level, domain),
                                           cost is not None, cost, text))

    def explain(self, level: int, domain: int, choices: list[Choice], cost: Cost) -> str:
        mandatory = self.root.total
        if not choices:
            return f"{self.place(level, domain)}: the gang's {mandatory} pods fit without evicting anyone"
        parts = []
        for choice in sorted(choices, key=lambda c: c.gang.key):
            gang, count = choice.gang, len(choice.pods)
            pods = f"pod{'s' if count != 1 else ''}"
            parts.append(f"gang {gang.key} ({count} {pods}, priority {gang.priority})" if choice.whole
                         else f"{count} spare {pods} of gang {gang.key} (priority {gang.priority})")
        text = (f"{self.place(level, domain)}: evicting {', '.join(parts)} lets the gang's {mandatory} pods fit "
                f"({cost.describe()})")
        others = [o for o in self.outcomes if (o.level, o.domain) != (self.layout.level_name(level),
                                                                    self.layout.domain_id(level, domain))]
        if others:
            text += "; other domains: " + "; ".join(f"{_short(o)}: {_alternative(o, cost)}" for o in others[:4])
            if len(others) > 4:
                text += f"; {len(others) - 4} more"
        return text

    def refusal(self) -> str:
        if not self.outcomes:
            return "no domain could hold the gang"
        seen = "; ".join(f"{_short(o)}: {o.note}" for o in self.outcomes[:4])
        more = f"; {len(self.outcomes) - 4} more" if len(self.outcomes) > 4 else ""
        return f"no preemption makes the gang fit: {seen}{more}"


def _short(outcome: DomainOutcome) -> str:
    return "the cluster" if outcome.level == "cluster" else f"{outcome.level} {outcome.domain.rsplit('/', 1)[-1]}"


def _alternative(outcome: DomainOutcome, chosen: Cost) -> str:
    if outcome.cost is None:
        return outcome.note
    if outcome.cost.victims == chosen.victims:
        return f"same victims' cost ({outcome.cost.describe()}), placement ranks lower"
    return f"costlier ({outcome.cost.describe()})"
