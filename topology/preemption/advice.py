"""What would make a refused gang fit: the advice behind `GET /debug/whatif/<gang>` and
`tas-extender plan --whatif`. It changes nothing.

The advice is the preemption search itself (select_victims), asked twice:
1. at the gang's own priority: exactly what preemption would evict (so advice and action agree);
2. failing that, at any priority: which running gangs or pods, of whatever priority, would have to go,
   cheapest first (lowest victim priority, fewest gangs broken, fewest GPUs, fewest pods); the refusal then says
   "fits in block-2 if ns/train-a (priority 50) is evicted; this gang's priority 10 cannot preempt it";
3. failing that too: no eviction helps, only more nodes (or a smaller gang).

Who may never go is the caller's `protected` set: DaemonSet and static pods are not in `running` at
all, and gangs a PodDisruptionBudget covers (`protected_by_budgets`) are protected.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..plan import PlanInput
from .candidates import RunningGang, Victim
from .select import BUDGET, SECONDS, PreemptionPlan, select_victims

ANY_PRIORITY = 1 << 62            # a preemptor above every pod: "whatever their priority"

FITS, PREEMPTS, NEEDS_PRIORITY, NEEDS_NODES = "fits", "preempts", "needs-priority", "needs-nodes"


@dataclass
class Advice:
    verdict: str                                   # FITS, PREEMPTS, NEEDS_PRIORITY or NEEDS_NODES
    text: str
    priority: int                                  # the gang's own
    result: PreemptionPlan | None = None           # the search that found the victims (or the last one tried)
    evicted: dict[str, int] = field(default_factory=dict)     # resource -> units the victims free
    blockers: list[Victim] = field(default_factory=list)       # victims the gang's priority cannot preempt

    def to_json(self, node_names: Sequence[str], resources: Sequence[str]) -> dict:
        body = {"verdict": self.verdict, "text": self.text, "priority": self.priority, "evicted": self.evicted}
        result = self.result
        if result is not None:
            body.update({"level": result.level, "domain": result.domain, "explanation": result.explanation,
                         "victims": [{"pod": v.pod, "gang": v.gang, "priority": v.priority,
                                      "node": node_names[v.node], "whole_gang": v.whole,
                                      "can_preempt": v.priority < self.priority}
                                     for v in result.victims],
                         "domains": [o.to_json() for o in result.outcomes]})
            if result.found and result.plan is not None:
                body["placement"] = {str(slot): node_names[node] for slot, node in sorted(
                    result.plan.slots.items(), key=lambda item: str(item[0]))}
        return body


def advise(inp: PlanInput, running: Iterable[RunningGang], *, protected: Iterable[str] = (),
           avoid: Iterable[str] = (), occupied_count: np.ndarray | None = None, budget: int = BUDGET,
           seconds: float | None = SECONDS, own: PreemptionPlan | None = None, refused: bool = True) -> Advice:
    """The advice for a gang the planner refused (see the module docstring). `own`: the search at the
    gang's own priority when the caller ran it already (the service's preemption); `refused` False: the
    caller does not know whether the gang fits as things are (the search then asks the planner first)."""
    running = list(running)
    tree = inp.tree
    protected = set(protected)
    if own is None:
        own = select_victims(inp, running, protected=protected, avoid=avoid, occupied_count=occupied_count,
                             budget=budget, seconds=seconds, refused=refused)
    if own.found:
        evicted = freed_units(own.victims, running, inp.resources)
        if not own.victims:
            return Advice(FITS, f"fits without evicting anyone: {own.explanation}", tree.priority, own)
        return Advice(PREEMPTS, f"its own priority {tree.priority} suffices: {own.explanation}", tree.priority,
                      own, evicted)
    anyone = beyond_priority(inp, running, protected=protected, avoid=avoid, occupied_count=occupied_count,
                             budget=budget, seconds=seconds)
    if anyone is not None and anyone.found:
        blockers = [v for v in anyone.victims if v.priority >= tree.priority]
        return Advice(NEEDS_PRIORITY, cannot_preempt_clause(tree, anyone), tree.priority, anyone,
                      freed_units(anyone.victims, running, inp.resources), blockers)
    why = (anyone or own).explanation.replace(f"a priority lower than {ANY_PRIORITY}", "any priority")
    return Advice(NEEDS_NODES, f"no eviction of running pods makes the gang fit ({why}); only more nodes "
                               f"(or a smaller gang) would", tree.priority, anyone or own)


def beyond_priority(inp: PlanInput, running: Iterable[RunningGang], *, protected: Iterable[str] = (),
                    avoid: Iterable[str] = (), occupied_count: np.ndarray | None = None, budget: int = BUDGET,
                    seconds: float | None = SECONDS, on_step=None) -> PreemptionPlan:
    """The same search as preemption's, for a preemptor of any priority and policy."""
    return select_victims(inp, running, priority=ANY_PRIORITY, policy="PreemptLowerPriority",
                          protected=protected, avoid=avoid, occupied_count=occupied_count, budget=budget,
                          seconds=seconds, refused=True, on_step=on_step)


def cannot_preempt_clause(tree, result: PreemptionPlan) -> str:
    """`fits in block-2 if ns/train-a (priority 50) is evicted; this gang's priority 10 cannot preempt it`."""
    place = "the cluster" if result.domain in (None, "cluster") else result.domain.rsplit("/", 1)[-1]
    by_gang: dict[str, tuple[int, int, bool]] = {}
    for victim in result.victims:
        count, priority, whole = by_gang.get(victim.gang, (0, victim.priority, victim.whole))
        by_gang[victim.gang] = (count + 1, max(priority, victim.priority), whole)
    parts = []
    for gang, (count, priority, whole) in sorted(by_gang.items(), key=lambda item: (-item[1][1], item[0])):
        what = gang if whole or count == 1 else f"{count} spare pods of {gang}"
        parts.append(f"{what} (priority {priority})")
    blockers = sorted({g for g, (_, p, _) in by_gang.items() if p >= tree.priority})
    verb = "is" if len(parts) == 1 and not parts[0][0].isdigit() else "are"
    text = f"fits in {place} if {_join(parts)} {verb} evicted"
    if tree.preemption_policy == "Never":
        return f"{text}; this gang's preemptionPolicy Never forbids preempting"
    if blockers:
        them = "it" if len(blockers) == 1 else "them"
        text += f"; this gang's priority {tree.priority} cannot preempt {them}"
    return text


def _join(parts: list[str]) -> str:
    if len(parts) <= 3:
        return " and ".join(parts) if len(parts) <= 2 else f"{parts[0]}, {parts[1]} and {parts[2]}"
    return f"{', '.join(parts[:3])} and {len(parts) - 3} more"


def freed_units(victims: Iterable[Victim], running: Iterable[RunningGang], resources) -> dict[str, int]:
    """Resource -> units the victims give back (GPUs, millicores, bytes)."""
    pods = {key: pod for gang in running for key, pod in gang.pods.items()}
    total = None
    for victim in victims:
        pod = pods.get(victim.pod)
        if pod is not None:
            total = pod.request.copy() if total is None else total + pod.request
    if total is None:
        return {}
    names = list(resources.names) if hasattr(resources, "names") else list(resources)
    return {name: int(total[i]) for i, name in enumerate(names) if total[i]}


def protected_by_budgets(budgets: Iterable[tuple[str, int, Iterable[str]]], gang_of: Mapping[str, str]
                         ) -> dict[str, str]:
    """Gangs a PodDisruptionBudget forbids evicting -> that budget. `budgets`: (name, disruptions it
    allows now, the pod keys it covers); `gang_of`: pod key -> its gang (what evicting it breaks). A
    gang is protected when it holds more of a budget's pods than the budget lets go."""
    protected: dict[str, str] = {}
    for name, allowed, pods in budgets:
        per_gang = Counter(gang_of[pod] for pod in pods if pod in gang_of)
        for gang, count in sorted(per_gang.items()):
            if count > max(allowed, 0):
                protected.setdefault(gang, name)
    return protected
