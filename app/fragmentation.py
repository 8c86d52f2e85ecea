"""The fragmentation measure of the service's cluster (topology/fragmentation.py does the sums): for
/debug/topology, the offline `topology` command and the Prometheus gauges.

The gauges are cached per cluster generation, so a scrape of an unchanged cluster costs a dictionary
lookup, and a changed one a few milliseconds at 16k nodes (benchmarks/bench_fragmentation.py).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from topology.cluster import Cluster
from topology.fragmentation import (Shape, TreeMeasure, default_shapes, measure, parse_shape,
                                    reclaimable_below)
from topology.preemption import RunningGang


def shapes_for(cluster: Cluster, texts: Iterable[str] | None = None) -> list[Shape]:
    """The shapes asked for (ShapeError names a bad one), else one unit and a whole node."""
    names = list(cluster.resources.names)
    if texts:
        return [parse_shape(text, names) for text in texts]
    return default_shapes(names, cluster.capacity.allocatable)


def usable_nodes(cluster: Cluster) -> np.ndarray:
    return ~cluster.unusable_nodes()


def measure_cluster(cluster: Cluster, shapes: Sequence[Shape], running: Iterable[RunningGang] | None = None,
                    below_priority: int | None = None, usable: np.ndarray | None = None
                    ) -> dict[str, TreeMeasure]:
    """Every valid topology's measure. With `below_priority`, `running` (the evictable pods, as the
    preemption search sees them) gives back the capacity of those below that priority."""
    usable = usable_nodes(cluster) if usable is None else usable
    reclaim = None
    if below_priority is not None:
        pods = [(pod.node, pod.request, gang.priority) for gang in running or () for pod in gang.pods.values()]
        reclaim = reclaimable_below(*cluster.capacity.free.shape, pods, below_priority)
    names = list(cluster.resources.names)
    return {name: measure(tree, names, cluster.capacity.allocatable, cluster.capacity.free, usable, shapes,
                          reclaim, below_priority)
            for name, tree in sorted(cluster.topologies.items())}


class GaugeCache:
    """The gauges' figures for one (generation, rebuild) of the service's cluster."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.figures: tuple[list, list] = ([], [])

    def get(self, state) -> tuple[list, list]:
        """([(topology, level, whole free)], [(topology, level, shape, pods)]); call under the state lock."""
        cluster = state.cluster
        # the generation does not move for every reservation; the free matrix's bytes do (0.1 ms at 16k)
        key = (id(cluster), state.generation, state.rebuilds, hash(cluster.capacity.free.tobytes()))
        if key != self.key:
            measures = measure_cluster(cluster, shapes_for(cluster))
            free = [(name, level.level, level.whole_free) for name, m in measures.items() for level in m.levels]
            largest = [(name, item.level, item.shape, item.pods) for name, m in measures.items()
                       for item in m.largest]
            self.key, self.figures = key, (free, largest)
        return self.figures
