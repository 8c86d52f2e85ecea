"""Hand-built clusters and group trees for the planner tests (no dependency on the grouper)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from topology.groups import Group, GroupTree, RoleSpec, SegmentInfo, Slot
from topology.plan import PlanInput
from topology.resources import ResourceIndex
from topology.tree import Level, TopologyTree

RESOURCES = ResourceIndex(["nvidia.com/gpu"])
GPU = RESOURCES.column["nvidia.com/gpu"]
CPU = RESOURCES.column["cpu"]


def request(gpu: int = 0, cpu: int = 0) -> np.ndarray:
    row = np.zeros(len(RESOURCES), dtype=np.int64)
    row[GPU], row[CPU], row[RESOURCES.column["pods"]] = gpu, cpu, 1
    return row


def free_matrix(gpus: Sequence[int], cpus: Sequence[int] | None = None) -> np.ndarray:
    free = np.zeros((len(gpus), len(RESOURCES)), dtype=np.int64)
    free[:, GPU] = gpus
    free[:, CPU] = cpus if cpus is not None else 64_000
    free[:, RESOURCES.column["memory"]] = 1 << 40
    free[:, RESOURCES.column["pods"]] = 110
    return free


def grid_topology(shape: Sequence[int], names: Sequence[str] = ("zone", "block", "rack", "host"),
                  nodes_per_leaf: int = 1) -> TopologyTree:
    """A regular tree: shape[i] children per domain of level i-1; the last level holds nodes_per_leaf
    nodes per domain. Level keys are example labels, aliases the short names."""
    paths = []
    def walk(prefix, level):
        if level == len(shape):
            for _ in range(nodes_per_leaf):
                paths.append(tuple(prefix))
            return
        for i in range(shape[level]):
            walk([*prefix, f"{names[level][0]}{i}"], level + 1)
    walk([], 0)
    # values are unique along each path prefix; make them unique globally for readable ids
    paths = [tuple("-".join(path[: i + 1]) for i in range(len(path))) for path in paths]
    node_names = [f"n{i:05d}" for i in range(len(paths))]
    levels = [Level(f"example.com/{names[i]}", names[i]) for i in range(len(shape))]
    return TopologyTree("test", "test", levels, node_names, paths)


def leaf(name: str, role: str, indexes, **kwargs) -> Group:
    return Group(name, slots=[Slot(role, i) for i in indexes], **kwargs)


def segmented(role: str, pods: int, size: int, segment_level: str | None = None,
              segment_preferred: str | None = None, **root) -> Group:
    count = (pods + size - 1) // size
    children = [leaf(f"{role}-seg-{s}", role, range(s * size, min(pods, (s + 1) * size)),
                     required_level=segment_level, preferred_level=segment_preferred,
                     segment=SegmentInfo(role, s, size, count)) for s in range(count)]
    return Group("job", children=children, **root)


def gang(root: Group, topology: str | None = "test", strategy: str | None = None) -> GroupTree:
    roles = {slot.role for slot in root.all_slots()}
    return GroupTree("ns", "job", "PyTorchJob", root,
                     {role: RoleSpec(role, 0) for role in sorted(roles)}, topology=topology, strategy=strategy)


def plan_input(root: Group, topology: TopologyTree | None, free: np.ndarray,
               requests: dict[str, np.ndarray], usable: dict[str, np.ndarray] | None = None,
               **kwargs) -> PlanInput:
    names = topology.node_names if topology is not None else [f"n{i}" for i in range(len(free))]
    usable = usable or {role: np.ones(len(names), dtype=bool) for role in requests}
    return PlanInput(tree=gang(root, topology.name if topology else None), topology=topology, free=free,
                     resources=RESOURCES, node_names=list(names), requests=requests, usable=usable, **kwargs)
