"""A gang waits for its minimum: while fewer pods exist than a PodGroup's minMember, or than its workload
says will come (a Job's parallelism, a JobSet's or kubeflow job's replicas, an LWS group's size; the
elastic minimum when it has one), none of them gets a node (as KAI and coscheduling do), so a controller
creating pods in batches never splits a gang."""
from __future__ import annotations

from collections.abc import Mapping

from topology.groups import GroupTree

# Controllers that create every pod of the gang without waiting for earlier pods to run (StatefulSets with
# OrderedReady and LWS with LeaderReady wait, so their gangs are planned at their first pod instead).
ALL_AT_ONCE = ("Job", "JobSet", "PyTorchJob", "TFJob", "JAXJob", "XGBoostJob")


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
    (a JobSet started in order, or with dependsOn, waits for its earlier jobs)."""
    if workload is None or workload.get("kind") not in ALL_AT_ONCE:
        return False
    return not (workload.get("kind") == "JobSet" and _jobset_in_order(workload.get("spec") or {}))


def creates_one_after_another(workload: Mapping | None) -> bool:
    """Whether the controller creates some of the gang's pods only once earlier ones run or are ready: a
    StatefulSet with OrderedReady (its default), an LWS with LeaderReady, a JobSet started in order or with
    dependsOn, an MPIJob whose launcher waits for its workers. Such a gang runs below its minimum for as
    long as its first pods take to start."""
    if workload is None:
        return False
    kind, spec = workload.get("kind"), workload.get("spec") or {}
    return (kind == "StatefulSet" and spec.get("podManagementPolicy") != "Parallel"
            or kind == "LeaderWorkerSet" and spec.get("startupPolicy") == "LeaderReady"
            or kind == "JobSet" and _jobset_in_order(spec)
            or kind == "MPIJob" and spec.get("launcherCreationPolicy") == "WaitForWorkersReady")


def _jobset_in_order(spec: Mapping) -> bool:
    ordered = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
    return ordered or any(job.get("dependsOn") for job in spec.get("replicatedJobs") or [])


def still_to_run(workload: Mapping) -> int | None:
    """A Job's completions not yet succeeded: its controller never creates more pods than that (the last
    pods of a Job with completions above its parallelism)."""
    if workload.get("kind") != "Job":
        return None
    completions = (workload.get("spec") or {}).get("completions")
    succeeded = (workload.get("status") or {}).get("succeeded") or 0
    if not isinstance(completions, int) or not isinstance(succeeded, int):
        return None
    return max(completions - succeeded, 1)


def workload_members(tree: GroupTree, exist: int, workload: Mapping) -> tuple[int, int]:
    """(pods of the workload that exist, the gang's minimum of them)."""
    need = tree.root.min_member or len(tree.slots())
    remaining = still_to_run(workload)
    return exist, need if remaining is None else min(need, remaining)
