"""A gang waits for its minimum: while fewer pods exist than a PodGroup's minMember, or than its workload
says will come (a Job's parallelism, a JobSet's or kubeflow job's replicas, an LWS group's size; the
elastic minimum when it has one), none of them gets a node (as KAI and coscheduling do), so a controller
creating pods in batches never splits a gang."""
from __future__ import annotations

from collections.abc import Mapping

from topology.groups import GroupTree

from .kinds import kind_named


def members(tree: GroupTree) -> tuple[int, int]:
    """(pods that exist, pods needed): every leaf needs its minMember."""
    leaves = [group for group in tree.groups() if group.is_leaf]
    exist = sum(len(leaf.slots) for leaf in leaves)
    return exist, sum(max(len(leaf.slots), leaf.min_member or 0) for leaf in leaves)


def waiting_message(tree: GroupTree, exist: int, need: int) -> str:
    """The refusal while fewer pods exist than needed; "" once they do."""
    if exist >= need:
        return ""
    return f"waiting for {need - exist} more pods of gang {tree.key}: {exist} of {need} exist"


def creates_all_at_once(workload: Mapping | None) -> bool:
    """Whether the workload's controller creates all of the gang's pods without waiting for some to run
    (its kind's `all_at_once`: a Job, a JobSet not started in order, the training operator's jobs)."""
    kind = kind_named(workload.get("kind")) if workload is not None else None
    return kind is not None and kind.all_at_once(workload)


def creates_one_after_another(workload: Mapping | None) -> bool:
    """Whether the controller creates some of the gang's pods only once earlier ones run or are ready (its
    kind's `one_after_another`: a StatefulSet with OrderedReady, an LWS with LeaderReady, a JobSet started in
    order or with dependsOn, an MPIJob whose launcher waits for its workers). Such a gang runs below its
    minimum for as long as its first pods take to start."""
    kind = kind_named(workload.get("kind")) if workload is not None else None
    return kind is not None and kind.one_after_another(workload)


def still_to_run(workload: Mapping) -> int | None:
    """How many pods the workload's controller will still create, when its kind knows (a Job's completions
    not yet succeeded)."""
    kind = kind_named(workload.get("kind"))
    return kind.still_to_run(workload) if kind is not None else None


def workload_members(tree: GroupTree, exist: int, workload: Mapping) -> tuple[int, int]:
    """(pods of the workload that exist, the gang's minimum of them)."""
    need = tree.root.min_member or len(tree.slots())
    remaining = still_to_run(workload)
    return exist, need if remaining is None else min(need, remaining)
