"""`tas-extender plan`: would these workloads fit on this cluster, and where?

Gangs are planned one after another with the service's planner; each placed gang holds its pods so
the next sees what is left, as the service would. Exit codes: 0 every gang placed, 1 a gang not placed,
2 bad input.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from grouper import keeps_apart
from grouper.exclusive import apart_owner
from grouper.affinity import selects
from topology.cluster import Cluster, pod_key
from topology.groups import Slot
from topology.plan import Plan
from topology.planner import plan_gang
from topology.preemption import RunningGang, RunningPod, advise, protected_by_budgets
from topology.preemption.advice import NEEDS_NODES

from ..scheduling.plan_input import gang_plan_input
from ..scheduling.preemptor import victim_group
from .gangs import role_needs
from .output import GangOutcome
from .policies import occupied_nodes
from .workloads import FileGang, WorkloadError

PLACED, NOT_PLACED, BAD_INPUT = 0, 1, 2


def plan_gangs(cluster: Cluster, gangs: Sequence[FileGang], strategy: str = "binpack",
               pods: Iterable[Mapping] = ()) -> list[GangOutcome]:
    """Plan each gang in turn. `pods`: the cluster file's pods (those running count for pod affinity and
    anti-affinity, as in the service); each gang's own running pods join them."""
    outcomes = []
    running = list(pods)
    for number, gang in enumerate(gangs):
        bound = _bound_indexes(cluster, gang)
        for pod in gang.bound_pods:          # running pods of the gang hold capacity (once)
            if pod_key(pod) not in cluster.pods:
                cluster.add_pod(pod)
            owner = apart_owner(pod, gang.tree.key, gang.tree)
            if owner is not None and pod_key(pod) in cluster.pods:
                cluster.apart[pod_key(pod)] = owner
            running.append(pod)
        try:
            plan = plan_gang(gang_plan_input(cluster, gang.tree, strategy=strategy, pods=running,
                                             occupied=occupied_nodes(cluster, gang.tree), bound=bound or None))
        except (ValueError, KeyError) as err:
            raise WorkloadError(f"workload file {gang.source}: {gang.workload}: {str(err).strip(chr(39))}") from None
        if plan.placed:
            _hold(cluster, number, gang, plan)
        outcomes.append(GangOutcome(gang.source, gang.workload, gang.tree, plan, _display_topology(cluster, gang)))
    return outcomes


def _bound_indexes(cluster: Cluster, gang: FileGang) -> dict[Slot, int]:
    bound = {}
    for slot, node in gang.bound.items():
        if node not in cluster.node_index:
            raise WorkloadError(f"workload file {gang.source}: {gang.workload}: pod {slot} has spec.nodeName "
                                f"{node!r}, which is not a node of the cluster file")
        bound[slot] = cluster.node_index[node]
    return bound


def _hold(cluster: Cluster, number: int, gang: FileGang, plan: Plan) -> None:
    needs = role_needs(cluster, gang.tree)
    apart = gang.tree.key if keeps_apart(gang.tree) else None
    for slot, node in plan.slots.items():
        if slot not in gang.bound:
            cluster.reserve(f"plan/{number}/{gang.tree.key}/{slot}", node, needs[slot.role].request, apart)


def _display_topology(cluster: Cluster, gang: FileGang):
    if gang.tree.topology and gang.tree.topology in cluster.topologies:
        return cluster.topologies[gang.tree.topology]
    return cluster.topologies[min(cluster.topologies)] if cluster.topologies else None


def exit_code(outcomes: Sequence[GangOutcome]) -> int:
    return PLACED if outcomes and all(o.plan.placed for o in outcomes) else NOT_PLACED


def advise_refused(cluster: Cluster, objects, outcomes: Sequence[GangOutcome], strategy: str = "binpack") -> None:
    """`plan --whatif`: for every gang not placed, the preemption search's advice (what would have to go,
    where, and the placement that follows), with the cluster file's running pods as the candidates:
    grouped by workload, never DaemonSet or static pods, gangs a PodDisruptionBudget protects left alone.
    Gangs placed earlier in the run hold their room (they are not victims)."""
    running = file_running_gangs(cluster, objects)
    guarded = file_budget_protected(objects, running)
    for outcome in outcomes:
        if outcome.plan.placed:
            continue
        tree = outcome.tree
        try:
            inp = gang_plan_input(cluster, tree, strategy=strategy, pods=objects.pods,
                                  occupied=occupied_nodes(cluster, tree))
        except (ValueError, KeyError) as err:
            outcome.advice = {"verdict": NEEDS_NODES, "text": f"the gang cannot be planned: {err}", "victims": []}
            continue
        advice = advise(inp, running, protected=set(guarded))
        outcome.advice = advice.to_json(cluster.node_names, cluster.resources.names)


def file_running_gangs(cluster: Cluster, objects) -> list[RunningGang]:
    """The bound pods of a cluster file as the preemption search sees them: per workload (or alone)."""
    members: dict[str, dict[str, RunningPod]] = {}
    priorities: dict[str, int] = {}
    for pod in objects.pods:
        key = pod_key(pod)
        usage = cluster.pods.get(key)
        gang = victim_group(pod, key) if usage is not None else None
        if gang is None:
            continue
        members.setdefault(gang, {})[key] = RunningPod(usage.node, usage.request)
        priority = (pod.get("spec") or {}).get("priority")
        priorities[gang] = max(priorities.get(gang, -(1 << 31)), priority if isinstance(priority, int) else 0)
    return [RunningGang(gang, priorities[gang], pods) for gang, pods in sorted(members.items())]


def file_budget_protected(objects, running: Sequence[RunningGang]) -> dict[str, str]:
    labels = {pod_key(pod): ((pod.get("metadata") or {}).get("labels") or {}) for pod in objects.pods}
    budgets = []
    for pdb in objects.other:
        if pdb.get("kind") != "PodDisruptionBudget":
            continue
        metadata = pdb.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        selector = (pdb.get("spec") or {}).get("selector")
        allowed = (pdb.get("status") or {}).get("disruptionsAllowed", 0)
        covered = [key for gang in running for key in gang.pods
                   if key.split("/", 1)[0] == namespace and selects(selector, labels.get(key, {}))]
        budgets.append((f"{namespace}/{metadata.get('name')}", allowed if isinstance(allowed, int) else 0, covered))
    return protected_by_budgets(budgets, {key: gang.key for gang in running for key in gang.pods})
