"""The trace simulator: workloads arrive, wait in a queue, run for their duration on the nodes a policy
picked, and leave.

At every event time (an arrival or a completion) completions free their pods first, arrivals join the
queue, then the pending workloads are tried in submission order: each one that fits now starts, one that
does not stays pending while those behind it may start. A pending workload is tried again only after some
capacity was freed (capacity that only shrank cannot make it fit), and only when what a policy decides
from changed since it was refused (`Policy.view`). A workload that can never fit, even on the empty
cluster, is not tried again. Only a workload's first attempt asks the policy why it does not fit; one
never placed is asked again at the end, on the cluster as its last attempt saw it.
"""
from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from grouper import keeps_apart
from grouper.errors import describe
from topology.cluster import Cluster
from topology.counts import sum_by_level
from topology.fragmentation import packing_scores, whole_free_nodes
from topology.groups import GroupTree, Slot
from topology.plan import Plan
from topology.tree import HOSTNAME_LABEL, TopologyTree

from .gangs import GPU, RoleNeeds, role_needs, split_gang
from .metrics import JobFigures, Locality, Summary, measure, summarize
from .policies import Policy
from .trace import TraceEntry
from .workloads import WorkloadError, gangs_of


@dataclass
class SimJob:
    entry: TraceEntry
    trees: list[GroupTree]
    needs: list[dict[str, RoleNeeds]]
    mandatory_gpus: int
    placed: float | None = None
    finished: float | None = None
    plans: list[Plan] = field(default_factory=list)
    reason: str = ""
    attempts: int = 0
    plan_seconds: float = 0.0
    tried_at_epoch: int = -1
    refused_view: bytes = b""                # what the policy saw when it last refused the job
    never_fits: bool = False                 # refused even on the empty cluster
    gpus: int = 0
    locality: Locality | None = None
    invalid: bool = False                    # never simulated: `reason` says which line and field

    @classmethod
    def rejected(cls, entry: TraceEntry, reason: str) -> SimJob:
        return cls(entry, [], [], 0, reason=reason, invalid=True)

    @property
    def key(self) -> str:
        return self.entry.key

    def result(self, cluster: Cluster) -> dict:
        pods = [{"role": slot.role, "index": slot.index, "node": cluster.node_names[node]}
                for plan in self.plans for slot, node in sorted(plan.slots.items())]
        return {"workload": self.key, "submitted": self.entry.at, "placed": self.placed,
                "finished": self.finished, "pods": pods, "reason": "" if self.placed is not None else self.reason}

    def figures(self) -> JobFigures:
        return JobFigures(self.entry.at, self.placed, self.finished, self.gpus, self.locality,
                          self.plan_seconds, self.attempts)


@dataclass
class SimulationResult:
    policy: str
    jobs: list[SimJob]                       # submission order
    timeline: list[tuple[float, int]]        # (time, GPUs in use from then on), background pods included
    total_gpus: int                          # GPUs of schedulable nodes
    cluster: Cluster
    whole_racks: list[tuple[float, int]] = field(default_factory=list)   # (time, whole free racks from then on)

    def results(self) -> list[dict]:
        return [job.result(self.cluster) for job in self.jobs]

    def summary(self) -> Summary:
        return summarize(self.policy, [job.figures() for job in self.jobs], self.timeline, self.total_gpus)


Progress = Callable[[int, int, float], None]     # (workloads done, workloads in total, simulated time)


def build_jobs(cluster: Cluster, entries: Sequence[TraceEntry]) -> list[SimJob]:
    """Group every trace entry into its gang(s); an invalid workload becomes a job that is never placed,
    its reason naming the trace line, the object and the field."""
    jobs = []
    gpu = cluster.resources.column.get(GPU)
    for entry in entries:
        try:
            trees = gangs_of(entry.workload, cluster.topologies)
            needs = [role_needs(cluster, tree) for tree in trees]
        except WorkloadError as err:
            jobs.append(SimJob.rejected(entry, f"trace line {entry.line}: {err}"))
            continue
        except ValueError as err:       # a pod template the planner cannot read (tolerations: x)
            jobs.append(SimJob.rejected(entry, f"trace line {entry.line}: {describe(entry.workload)}: {err}"))
            continue
        mandatory = 0
        if gpu is not None:
            for tree, tree_needs in zip(trees, needs):
                for slot in split_gang(tree.root)[0]:
                    mandatory += int(tree_needs[slot.role].request[gpu])
        jobs.append(SimJob(entry, trees, needs, mandatory))
    return jobs


class Simulation:
    def __init__(self, cluster: Cluster, policy: Policy, entries: Sequence[TraceEntry],
                 progress: Progress | None = None, topology: str | None = None, plain_pods: str | None = None):
        """`plain_pods`: how bare Pods without topology settings are placed, as kube-scheduler would with
        the extender's scores for pods of no gang (binpack, spread or neutral; see `_plain_plan`); None:
        by the policy like any workload."""
        self.cluster = cluster
        self.policy = policy
        order = sorted(range(len(entries)), key=lambda i: (entries[i].at, i))
        self.jobs = build_jobs(cluster, [entries[i] for i in order])
        self.progress = progress
        self.metric_topology = self._metric_topology(topology)
        self.gpu = cluster.resources.column.get(GPU)
        schedulable = np.array([n.ready and not n.unschedulable and not n.taints for n in cluster.nodes],
                               dtype=bool)
        self.schedulable = schedulable        # counted for utilization
        self.reachable = np.array([n.ready and not n.unschedulable for n in cluster.nodes], dtype=bool)
        self.total_gpus = int(cluster.capacity.allocatable[schedulable, self.gpu].sum()) if self.gpu is not None else 0
        self.epoch = 0                       # completions so far: capacity grew
        self.timeline: list[tuple[float, int]] = []
        self.whole_racks: list[tuple[float, int]] = []
        self.plain_pods = plain_pods
        self.done = 0

    def _metric_topology(self, name: str | None) -> TopologyTree | None:
        if name:
            return self.cluster.topology(name)
        return self.cluster.topologies[min(self.cluster.topologies)] if self.cluster.topologies else None

    # --- the event loop ----------------------------------------------------------------------------------
    def run(self) -> SimulationResult:
        arrivals = [job for job in self.jobs if not job.invalid]
        arrivals.reverse()                   # pop() from the end gives submission order
        completions: list[tuple[float, int, SimJob]] = []
        pending: list[SimJob] = []
        sequence = 0
        while arrivals or completions:
            now = min(([arrivals[-1].entry.at] if arrivals else []) +
                      ([completions[0][0]] if completions else []))
            while completions and completions[0][0] <= now:
                _, _, job = heapq.heappop(completions)
                self._finish(job)
            while arrivals and arrivals[-1].entry.at <= now:
                pending.append(arrivals.pop())
            for job in list(pending):
                if self._try(job, now):
                    pending.remove(job)
                    sequence += 1
                    heapq.heappush(completions, (job.finished, sequence, job))
            self._record(now)
        for job in pending:
            job.reason = self._final_reason(job) if job.attempts else "never tried"
        return SimulationResult(self.policy.name, self.jobs, self.timeline, self.total_gpus, self.cluster,
                                self.whole_racks)

    def _try(self, job: SimJob, now: float) -> bool:
        if job.tried_at_epoch == self.epoch or job.never_fits:
            return False                     # nothing was freed since it last failed
        job.tried_at_epoch = self.epoch
        if job.attempts and self.gpu is not None and job.mandatory_gpus > self._free_gpus(self.reachable):
            return False                     # cannot fit: keep the reason of the last real attempt
        view = self.policy.view(self.cluster, list(zip(job.trees, job.needs)))
        if job.attempts and view == job.refused_view:
            return False                     # the same answer as last time: keep its reason
        plans = []
        explain = not job.attempts
        for tree, needs in zip(job.trees, job.needs):
            started = time.perf_counter()
            if self.plain_pods is not None and _plain(job, tree):
                plan = self._plain_plan(tree, needs)
            else:
                plan = self.policy.place(self.cluster, tree, explain=explain)
            job.plan_seconds += time.perf_counter() - started
            job.attempts += 1
            if not plan.placed:
                job.reason = plan.reason or "does not fit"
                job.refused_view = view
                job.never_fits = bool(plan.details.get("never_fits"))
                self._release(job, plans)
                return False
            self._reserve(job, tree, needs, plan)
            plans.append((tree, plan))
        job.plans = [plan for _, plan in plans]
        job.placed, job.finished = now, now + job.entry.duration
        job.gpus = sum(int(needs[s.role].request[self.gpu]) for (tree, plan), needs in zip(plans, job.needs)
                       for s in plan.slots) if self.gpu is not None else 0
        job.locality = self._measure(job)
        job.reason = ""
        return True

    def _final_reason(self, job: SimJob) -> str:
        """Why a job never placed does not fit, asked on the cluster as it is at the end (its last
        attempt saw the same: it is tried whenever its view changes)."""
        reserved: list[tuple[GroupTree, Plan]] = []
        reason = job.reason
        for tree, needs in zip(job.trees, job.needs):
            plan = self.policy.place(self.cluster, tree)
            if not plan.placed:
                reason = plan.reason or "does not fit"
                break
            self._reserve(job, tree, needs, plan)
            reserved.append((tree, plan))
        self._release(job, reserved)
        return reason

    def _measure(self, job: SimJob) -> Locality | None:
        if len(job.trees) != 1:
            return None
        tree = job.trees[0]
        topology = self.cluster.topologies.get(tree.topology) if tree.topology else self.metric_topology
        return measure(tree, job.plans[0].slots, topology)

    def _reserve(self, job: SimJob, tree: GroupTree, needs: dict[str, RoleNeeds], plan: Plan) -> None:
        apart = tree.key if keeps_apart(tree) else None
        for slot, node in plan.slots.items():
            self.cluster.reserve(_pod_key(job, tree, slot), node, needs[slot.role].request, apart)

    def _release(self, job: SimJob, plans: Sequence[tuple[GroupTree, Plan]]) -> None:
        for tree, plan in plans:
            for slot in plan.slots:
                self.cluster.release(_pod_key(job, tree, slot))

    def _finish(self, job: SimJob) -> None:
        self._release(job, list(zip(job.trees, job.plans)))
        self.epoch += 1
        self.done += 1
        if self.progress:
            self.progress(self.done, len(self.jobs), job.finished)

    def _free_gpus(self, nodes: np.ndarray) -> int:
        return int(np.maximum(self.cluster.free[nodes, self.gpu], 0).sum())

    def _record(self, now: float) -> None:
        used = self.total_gpus - self._free_gpus(self.schedulable) if self.gpu is not None else 0
        if self.timeline and self.timeline[-1][0] == now:
            self.timeline[-1] = (now, used)
        else:
            self.timeline.append((now, used))
        racks = self._whole_racks()
        if self.whole_racks and self.whole_racks[-1][0] == now:
            self.whole_racks[-1] = (now, racks)
        else:
            self.whole_racks.append((now, racks))

    def _whole_racks(self) -> int:
        """Racks (the level above the nodes) whose GPU nodes are all schedulable and entirely free."""
        tree = self.metric_topology
        if tree is None or self.gpu is None:
            return 0
        level = tree.depth - 2 if tree.levels[-1].key == HOSTNAME_LABEL and tree.depth > 1 else tree.depth - 1
        units, whole = whole_free_nodes(self.cluster.capacity.allocatable, self.cluster.free, self.schedulable,
                                        self.gpu)
        unit_sums, whole_sums = sum_by_level(tree, units & tree.member), sum_by_level(tree, whole & tree.member)
        return int(((unit_sums[level] > 0) & (whole_sums[level] == unit_sums[level])).sum())

    def _plain_plan(self, tree: GroupTree, needs: dict[str, RoleNeeds]) -> Plan:
        """A pod of no gang as kube-scheduler places it: the nodes it fits on, the extender's score (x20, as
        the shipped profile weighs it, 0-10 scaled to 0-100) plus NodeResourcesFit's LeastAllocated on cpu
        and memory (weight 1, 0-100); the highest total wins, the first node on a tie."""
        free = self.cluster.free.copy()
        slots = {}
        topology = self.metric_topology
        columns = [self.cluster.resources.column[r] for r in ("cpu", "memory") if r in self.cluster.resources.column]
        allocatable = self.cluster.capacity.allocatable
        for slot in tree.slots():
            request = needs[slot.role].request
            fits = np.flatnonzero(self.schedulable & (free >= request).all(axis=1))
            if fits.size == 0:
                return Plan(placed=False, reason="no node has room for the pod")
            column = self.gpu if self.gpu is not None and request[self.gpu] > 0 else None
            extender = (packing_scores(topology, allocatable, free, request, fits, column, self.plain_pods)
                        if column is not None else np.full(fits.size, 5))
            least = ((free[np.ix_(fits, columns)] - request[columns]) /
                     np.maximum(allocatable[np.ix_(fits, columns)], 1)).mean(axis=1) if columns else 0
            node = int(fits[int(np.argmax(20 * 10 * extender + 100 * least))])
            slots[slot] = node
            free[node] -= request
        return Plan(placed=True, slots=slots)


def _plain(job: SimJob, tree: GroupTree) -> bool:
    """A bare Pod with no topology or gang settings: kube-scheduler places it, not a gang planner."""
    return job.entry.workload.get("kind") == "Pod" and tree.topology is None and len(job.trees) == 1


def _pod_key(job: SimJob, tree: GroupTree, slot: Slot) -> str:
    return f"sim/{job.key}/{tree.name}/{slot}"


def simulate(cluster: Cluster, policy: Policy, entries: Sequence[TraceEntry],
             progress: Progress | None = None) -> SimulationResult:
    return Simulation(cluster, policy, entries, progress).run()
