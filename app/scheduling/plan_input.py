"""The planner's input for one gang, built in one place for everything that plans: the service (filter,
re-plans, preemption: app/scheduling/planning.py), `tas-extender plan` (app/offline/plan_cmd.py) and
`simulate`'s tas policy (app/offline/policies.py). So `plan` answers as the running service would on the
same cluster: the same per-node limits, the same pod affinity and anti-affinity against running pods.

What differs between callers is passed in, never decided here: which pods run (`pods`), which nodes other
exclusive gangs occupy (`occupied`), which slots are pinned, which nodes kube-scheduler offered, and the
free capacity to plan on."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from grouper.node_limit import limits_per_node
from topology.cluster import Cluster
from topology.groups import GroupTree, Slot
from topology.plan import PlanInput
from topology.planner import build_plan_input

from . import pod_affinity


def gang_plan_input(cluster: Cluster, tree: GroupTree, *, strategy: str = "binpack", pods: Iterable[Mapping] = (),
                    occupied: np.ndarray | None = None, bound: Mapping[Slot, int] | None = None,
                    candidates: Mapping[str, np.ndarray] | None = None, free: np.ndarray | None = None,
                    explain: bool = True) -> PlanInput:
    """The PlanInput of `tree` on `cluster`. `strategy`: the default when the gang sets none; `pods`: pod
    objects, of which those running on the cluster's nodes count for pod (anti-)affinity; `occupied`: per
    node, whether other exclusive gangs hold it (None: nothing to keep apart); `bound`: slots pinned to node
    indexes; `candidates`: per role, a bool mask of the nodes offered; `free`: the free matrix to plan on
    (default: the cluster's)."""
    restricted = pod_affinity.allowed_by_pods(cluster, tree, pods)
    topology = cluster.topologies.get(tree.topology or "")
    tree = pod_affinity.together(tree, topology)
    return build_plan_input(cluster, tree, strategy=tree.strategy or strategy, bound=bound, candidates=candidates,
                            occupied_nodes=occupied, free=free, per_node=limits_per_node(tree),
                            restricted=restricted, one_per_domain=pod_affinity.apart(tree, topology),
                            explain=explain)
