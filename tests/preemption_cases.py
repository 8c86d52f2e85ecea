"""The seed story of issue 9 as pure inputs: twelve 8-GPU nodes, one pod per node, three units of four
under a spine (unit 0 under leaf A; units 1 and 2 under leaf B), best-effort 4-pod jobs on nodes 0-3
and 4-7, and a high-priority 8-pod job of 2 segments of 4 (required: unit; preferred job level: leaf)."""
from __future__ import annotations

import numpy as np

from topology.groups import GroupTree, RoleSpec
from topology.plan import PlanInput
from topology.preemption import RunningGang, RunningPod
from topology.tree import Level, TopologyTree

from planner_cases import RESOURCES, free_matrix, request, segmented

UNIT_OF_NODE = [0] * 4 + [1] * 4 + [2] * 4
LEAF_OF_UNIT = ["leaf-a", "leaf-b", "leaf-b"]


def seed_topology() -> TopologyTree:
    paths = [("spine-0", LEAF_OF_UNIT[u], f"unit-{u}") for u in UNIT_OF_NODE]
    levels = [Level("example.com/spine", "spine"), Level("example.com/leaf", "leaf"), Level("example.com/unit", "unit")]
    return TopologyTree("fabric", "test", levels, [f"node-{i:02d}" for i in range(12)], paths)


def seed_running(priority: int = 0) -> list[RunningGang]:
    def job(name: str, nodes) -> RunningGang:
        return RunningGang(f"research/{name}", priority,
                           {f"research/{name}-{i}": RunningPod(node, request(gpu=8)) for i, node in enumerate(nodes)})
    return [job("job-a", range(0, 4)), job("job-b", range(4, 8))]


def seed_free(running: list[RunningGang]) -> np.ndarray:
    free = free_matrix([8] * 12)
    for gang in running:
        for pod in gang.pods.values():
            free[pod.node] -= pod.request
    return free


def seed_input(priority: int = 1000, policy: str = "PreemptLowerPriority") -> tuple[PlanInput, list[RunningGang]]:
    topology = seed_topology()
    root = segmented("worker", 8, 4, segment_level="unit", preferred_level="leaf")
    tree = GroupTree("prod", "llm", "PyTorchJob", root, {"worker": RoleSpec("worker", 8)}, topology="fabric",
                     priority=priority, preemption_policy=policy)
    running = seed_running()
    inp = PlanInput(tree=tree, topology=topology, free=seed_free(running), resources=RESOURCES,
                    node_names=list(topology.node_names), requests={"worker": request(gpu=8)},
                    usable={"worker": np.ones(12, dtype=bool)})
    return inp, running
