"""Placement quality figures: locality of one placed gang, and the summary of a simulation run."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from topology.groups import GroupTree, Slot
from topology.tree import HOSTNAME_LABEL, LevelError, TopologyTree


@dataclass
class Locality:
    """How spread one placed workload is, at every level of the topology above the hosts."""

    levels: list[str]                                    # level display names, coarsest first
    job_spans: list[int]                                 # distinct domains the whole workload uses, per level
    segment_spans: list[list[int]] = field(default_factory=list)   # per segment, per level
    preferred: tuple[int, int] = (0, 0)                  # (met, total) over groups with a preferred level
    required: tuple[int, int] = (0, 0)                   # (met, total) over groups with a required level
    pods: int = 0


def locality_levels(topology: TopologyTree) -> list[int]:
    """Levels worth counting domains at: all but a hostname level (one domain per node)."""
    return [i for i, level in enumerate(topology.levels) if level.key != HOSTNAME_LABEL]


def measure(tree: GroupTree, slots: Mapping[Slot, int], topology: TopologyTree | None) -> Locality | None:
    """Locality of a placed gang (None without a topology to measure against)."""
    if topology is None or not slots:
        return None
    levels = locality_levels(topology)

    def spans(nodes: Sequence[int]) -> list[int]:
        return [len({int(topology.node_domain[level][n]) for n in nodes}) for level in levels]

    segment_spans = []
    preferred = [0, 0]
    required = [0, 0]
    own = tree.topology is None or tree.topology == topology.name
    for group in tree.groups():
        nodes = [slots[s] for s in group.all_slots() if s in slots]
        if not nodes:
            continue
        if group.segment is not None and len(nodes) > 1:
            segment_spans.append(spans(nodes))
        for name, tally in ((group.preferred_level, preferred), (group.required_level, required)):
            if name and own:
                tally[1] += 1
                tally[0] += _within_one(topology, name, nodes)
    return Locality([topology.levels[i].display for i in levels], spans(list(slots.values())),
                    segment_spans, tuple(preferred), tuple(required), len(slots))


def _within_one(topology: TopologyTree, level_name: str, nodes: Sequence[int]) -> bool:
    try:
        level = topology.level_index(level_name)
    except LevelError:
        return False
    domains = {int(topology.node_domain[level][n]) for n in nodes}
    return len(domains) == 1 and -1 not in domains


# --- summary -------------------------------------------------------------------------------------------

@dataclass
class JobFigures:
    """What the summary needs of one simulated workload."""

    submitted: float
    placed: float | None
    finished: float | None
    gpus: int                         # GPUs the placed pods hold
    locality: Locality | None
    plan_seconds: float               # planning time summed over every attempt
    attempts: int


@dataclass
class Summary:
    policy: str
    workloads: int
    placed: int
    never_placed: int
    mean_wait: float
    p90_wait: float
    gpu_utilization: float            # time-averaged share of schedulable GPUs in use
    contended_utilization: float | None   # the same, only while some workload waits that later starts
    makespan: float                   # first submission to last finish
    levels: list[str]
    job_spans: list[float | None]     # mean distinct domains per multi-pod workload, per level
    segment_spans: list[float | None]  # mean distinct domains per multi-pod segment, per level
    preferred_met: float | None       # share of preferred constraints met (None: none asked)
    required_met: float | None
    plan_ms_mean: float               # planning time per workload (all its attempts)
    plan_ms_p90: float
    attempts: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def summarize(policy: str, jobs: Sequence[JobFigures], timeline: Sequence[tuple[float, int]],
              total_gpus: int) -> Summary:
    placed = [j for j in jobs if j.placed is not None]
    waits = np.array([j.placed - j.submitted for j in placed]) if placed else np.zeros(0)
    start = min((j.submitted for j in jobs), default=0.0)
    end = max([j.finished for j in placed if j.finished is not None] + [start])
    localities = [j.locality for j in placed if j.locality is not None]
    multi = [loc for loc in localities if loc.pods > 1]
    levels = localities[0].levels if localities else []
    plan_ms = np.array([j.plan_seconds * 1000 for j in jobs]) if jobs else np.zeros(0)
    return Summary(
        policy=policy, workloads=len(jobs), placed=len(placed), never_placed=len(jobs) - len(placed),
        mean_wait=float(waits.mean()) if waits.size else 0.0,
        p90_wait=float(np.percentile(waits, 90)) if waits.size else 0.0,
        gpu_utilization=utilization(timeline, start, end, total_gpus),
        contended_utilization=contended(timeline, [(j.submitted, j.placed) for j in placed], total_gpus),
        makespan=end - start,
        levels=levels,
        job_spans=_mean_columns([loc.job_spans for loc in multi], len(levels)),
        segment_spans=_mean_columns([s for loc in localities for s in loc.segment_spans], len(levels)),
        preferred_met=_share([loc.preferred for loc in localities]),
        required_met=_share([loc.required for loc in localities]),
        plan_ms_mean=float(plan_ms.mean()) if plan_ms.size else 0.0,
        plan_ms_p90=float(np.percentile(plan_ms, 90)) if plan_ms.size else 0.0,
        attempts=sum(j.attempts for j in jobs),
    )


def utilization(timeline: Sequence[tuple[float, int]], start: float, end: float, total: int) -> float:
    """Time-weighted mean of GPUs in use over [start, end], as a share of `total`. The timeline holds
    (time, GPUs in use from then on) steps in time order."""
    if end <= start or total <= 0 or not timeline:
        return 0.0
    area = 0.0
    for (t, used), (t_next, _) in zip(timeline, list(timeline[1:]) + [(end, 0)]):
        low, high = max(t, start), min(t_next, end)
        if high > low:
            area += used * (high - low)
    return area / (total * (end - start))


def contended(timeline: Sequence[tuple[float, int]], waits: Sequence[tuple[float, float]],
              total: int) -> float | None:
    """Utilization over the union of the waiting intervals [submitted, placed) (None: nobody waited).
    Workloads that never start are left out: they would make every moment look contended."""
    merged: list[list[float]] = []
    for low, high in sorted(w for w in waits if w[1] > w[0]):
        if merged and low <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    length = sum(high - low for low, high in merged)
    if not merged or total <= 0:
        return None
    area = sum(utilization(timeline, low, high, total) * (high - low) for low, high in merged)
    return area / length


def _mean_columns(rows: Sequence[Sequence[int]], width: int) -> list[float | None]:
    if not rows:
        return [None] * width
    return [float(x) for x in np.mean(np.array(rows, dtype=float), axis=0)]


def _share(tallies: Sequence[tuple[int, int]]) -> float | None:
    total = sum(t for _, t in tallies)
    return sum(m for m, _ in tallies) / total if total else None
