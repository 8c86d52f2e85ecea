"""Independent of the preemption search: the cheapest victim set by brute force over every subset the
rules allow (each lower-priority gang loses nothing, up to its spare pods, or everything), checked with
the planner oracle's exhaustive placement search. Tiny instances only."""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from topology.plan import PlanInput
from topology.preemption import RunningGang

from oracle import brute_force

NO_VICTIM = -(1 << 62)


def allowed_losses(gang: RunningGang) -> list[tuple[frozenset, bool]]:
    """(pods evicted, gang taken whole) for every loss the rules allow."""
    pods = frozenset(gang.pods)
    losses = [(frozenset(), False)]
    spare, eligible = gang.spare(), gang.eligible()
    for size in range(1, spare + 1):
        losses += [(frozenset(c), False) for c in itertools.combinations(eligible, size)]
    if spare < len(pods):
        losses.append((pods, True))
    return losses


def freed(inp: PlanInput, gangs: list[RunningGang], losses) -> np.ndarray:
    free = inp.free.copy()
    for gang, (pods, _) in zip(gangs, losses):
        for key in pods:
            free[gang.pods[key].node] += gang.pods[key].request
    return free


def cheapest(inp: PlanInput, running: list[RunningGang], priority: int) -> tuple[int, int, int, int] | None:
    """The lowest (highest victim priority, gangs broken, GPUs evicted, pods evicted) that lets some
    placement keep every hard rule, or None when no allowed eviction does."""
    gangs = [g for g in running if g.priority < priority and g.key != inp.tree.key and g.pods]
    names = list(inp.resources.names)
    unit = names.index("nvidia.com/gpu") if "nvidia.com/gpu" in names else names.index("cpu")
    best = None
    for losses in itertools.product(*(allowed_losses(g) for g in gangs)):
        chosen = [(g, pods, whole) for g, (pods, whole) in zip(gangs, losses) if pods]
        cost = (max((g.priority for g, _, _ in chosen), default=NO_VICTIM),
                sum(1 for g, _, whole in chosen if whole and len(g.pods) > 1),
                sum(int(g.pods[key].request[unit]) for g, pods, _ in chosen for key in pods),
                sum(len(pods) for _, pods, _ in chosen))
        if best is not None and cost >= best:
            continue
        if brute_force(replace(inp, free=freed(inp, gangs, losses))) is not None:
            best = cost
    return best
