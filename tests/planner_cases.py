"""Hand-built clusters and group trees for the planner tests (no dependency on the grouper)."""
from __future__ import annotations

import dataclasses
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


# --- random fragmented instances (property test against the brute force, and its longer benchmark run) ---

RANDOM_LEVELS = ("zone", "block", "rack", "host", "slot")


def random_topology(rng: np.random.Generator, max_nodes: int = 14) -> TopologyTree:
    """3-5 levels, 1-3 children per domain (one level sometimes up to 10: many similar domains), at most
    `max_nodes` nodes (the last level names nodes)."""
    depth = int(rng.integers(3, 6))
    wide = int(rng.integers(0, 2 * depth))
    paths: list[tuple[str, ...]] = []
    def walk(prefix: list[str], level: int) -> None:
        for i in range(int(rng.integers(1, 11 if level == wide else 4))):
            if len(paths) >= max_nodes:
                return
            path = [*prefix, f"{prefix[-1] if prefix else ''}{RANDOM_LEVELS[level][0]}{i}"]
            if level == depth - 1:
                paths.append(tuple(path))
            else:
                walk(path, level + 1)
    walk([], 0)
    levels = [Level(f"example.com/{name}", name) for name in RANDOM_LEVELS[:depth]]
    return TopologyTree("test", "test", levels, [path[-1] for path in paths], paths)


def random_gang(rng: np.random.Generator, level_names: list[str], pods: int = 7) -> Group:
    """An optional master, worker segments (each maybe required at a finer level, maybe with a
    minimum), maybe nested in an inner group, the root maybe required, with minSubGroup/minMember."""
    def level(start: int = 0):
        choices = level_names[start:]
        return None if not choices or rng.integers(0, 3) == 0 else str(rng.choice(choices))

    index = 0
    def slots(role: str, size: int) -> list[Slot]:
        nonlocal index
        made = [Slot(role, index + i) for i in range(size)]
        index += size
        return made

    children: list[Group] = []
    if rng.integers(0, 2):
        children.append(Group("master", slots=slots("m", 1), required_level=level()))
    size = int(rng.integers(1, 3))
    count = int(rng.integers(1, max(2, (pods - index) // size + 1)))
    segment_level = level(1)
    segments = []
    for s in range(count):
        members = slots("w", size)
        minimum = int(rng.integers(1, size + 1)) if rng.integers(0, 3) == 0 else None
        segments.append(Group(f"seg-{s}", slots=members, min_member=minimum, required_level=segment_level,
                              segment=SegmentInfo("w", s, size, count)))
    if children and rng.integers(0, 3) == 0:
        children.append(Group("workers", children=segments, required_level=level(1),
                              min_subgroup=int(rng.integers(1, count + 1)) if rng.integers(0, 3) == 0 else None))
    else:
        children.extend(segments)
    total = sum(len(child.all_slots()) for child in children)
    return Group("job", children=children, required_level=level(), preferred_level=level(),
                 min_subgroup=int(rng.integers(1, len(children) + 1)) if rng.integers(0, 4) == 0 else None,
                 min_member=int(rng.integers(1, total + 1)) if rng.integers(0, 4) == 0 else None)


def random_limited_instance(seed: int) -> PlanInput:
    """random_instance(seed) with some roles held to a few pods per node (host ports, hostname spread or
    anti-affinity): the workers, or master and workers with one limit, of 1 or 2 pods."""
    inp = random_instance(seed)
    rng = np.random.default_rng([seed, 1])
    limit = int(rng.integers(1, 3))
    roles = ("w",) if rng.integers(0, 2) else ("m", "w")
    return dataclasses.replace(inp, per_node={role: limit for role in roles})


def random_instance(seed: int) -> PlanInput:
    """A tiny fragmented cluster (free GPUs 0-16 in steps of 4) and a gang of several roles."""
    rng = np.random.default_rng(seed)
    topology = random_topology(rng)
    nodes = len(topology.node_names)
    root = random_gang(rng, [level.display for level in topology.levels])
    requests = {"m": request(gpu=int(rng.choice([0, 4, 8])), cpu=int(rng.choice([1000, 8000]))),
                "w": request(gpu=int(rng.choice([4, 8])), cpu=int(rng.choice([1000, 8000])))}
    free = free_matrix(rng.choice([0, 4, 8, 12, 16], size=nodes).tolist(),
                       rng.choice([4000, 16000, 64000], size=nodes).tolist())
    usable = {role: rng.integers(0, 8, size=nodes) > 0 for role in requests}
    return PlanInput(tree=gang(root), topology=topology, free=free, resources=RESOURCES,
                     node_names=list(topology.node_names), requests=requests, usable=usable,
                     strategy=str(rng.choice(["binpack", "spread"])))
