"""Figures of the demo cluster that tests derive from the cluster itself rather than write down (how many
nodes, how many pods of 8 GPUs fit in it or in its best domain of a level), so that a change of the demo
(a rack more, a busy node less) changes what the tests expect with it."""
from __future__ import annotations

import numpy as np

from topology.cluster import Cluster
from topology.counts import sum_by_level
from topology.demo import demo_objects
from topology.objects import ClusterObjects


def demo_cluster() -> Cluster:
    return Cluster.from_objects(ClusterObjects.from_objects(demo_objects()))


def pods_of(cluster: Cluster, gpus: int = 8) -> np.ndarray:
    """Per node, how many pods of `gpus` GPUs fit on it now (0 on unusable nodes)."""
    free, _ = cluster.usable_free()
    return free[:, cluster.resources.column["nvidia.com/gpu"]] // gpus


def most_in_one(cluster: Cluster, level: str, gpus: int = 8, topology: str = "default") -> int:
    """The most pods of `gpus` GPUs one domain of the level holds now."""
    tree = cluster.topologies[topology]
    return int(sum_by_level(tree, pods_of(cluster, gpus))[tree.level_index(level)].max())


def whole_free_nodes(cluster: Cluster) -> int:
    """Usable nodes with GPUs, every one of them free."""
    free, _ = cluster.usable_free()
    gpu = cluster.resources.column["nvidia.com/gpu"]
    total = cluster.capacity.allocatable[:, gpu]
    return int(((free[:, gpu] == total) & (total > 0)).sum())


def pods_if_pods_gone(cluster: Cluster, gpus: int = 8) -> np.ndarray:
    """Per usable node, pods of `gpus` GPUs that fit once every running pod is gone: the devices of
    allocated DRA claims stay used (the model frees them when the claim is deallocated, not before)."""
    gpu = cluster.resources.column["nvidia.com/gpu"]
    room = cluster.capacity.allocatable[:, gpu] - cluster.dra_used[:, gpu]
    return np.where(cluster.unusable_nodes(), 0, room // gpus)


def by_level(cluster: Cluster, per_node: np.ndarray, topology: str = "default") -> list[int]:
    """The most of `per_node` one domain holds, per level from the top (the whole cluster first)."""
    tree = cluster.topologies[topology]
    return [int(per_node.sum())] + [int(level.max()) for level in sum_by_level(tree, per_node)]


def tightest(cluster: Cluster, level: str, pods: int, gpus: int = 8, topology: str = "default") -> str:
    """The domain of the level with the least room that still holds `pods` pods of `gpus` GPUs (best fit)."""
    tree = cluster.topologies[topology]
    index = tree.level_index(level)
    rooms = sum_by_level(tree, pods_of(cluster, gpus))[index]
    fitting = [(int(room), i) for i, room in enumerate(rooms) if room >= pods]
    return tree.domain_ids[index][min(fitting)[1]]
