"""Foundation benchmarks: building the cluster model and its trees, per-domain pod counts, memory.

    python benchmarks/bench_topology.py

Cluster: zones > blocks > racks > nodes of 8 GPUs (benchmarks/synth.py), one KAI Topology with 4 levels
(zone, block, rack, hostname). Targets (issue 2): build <= 1 s at 65,536 nodes; pods per domain for one
request over 16,384 nodes at every level <= 1 ms median.
"""
from __future__ import annotations

import gc
import statistics
import time
import tracemalloc

import numpy as np

from synth import GPU, synth_cluster_objects, synth_nodes, synth_topology
from topology.cluster import Cluster
from topology.counts import hop_distances, pods_per_node, segments_by_level, sum_by_level
from topology.nodes import PodPlacementRules
from topology.objects import ClusterObjects

SIZES = (16_384, 65_536)


def timed(fn, repeat: int, clock=time.perf_counter) -> list[float]:
    times = []
    for _ in range(repeat):
        start = clock()
        fn()
        times.append(clock() - start)
    return times


def busy_cluster(node_count: int, seed: int = 7) -> Cluster:
    """A cluster where a random third of the GPUs are taken by bound pods."""
    cluster = Cluster(synth_nodes(node_count), [synth_topology()])
    rng = np.random.default_rng(seed)
    gpu = cluster.resources.column[GPU]
    used = rng.integers(0, 9, size=node_count) * (rng.random(node_count) < 0.4)
    cluster.capacity.used[:, gpu] = used
    cluster.capacity.free[:, gpu] -= used
    return cluster


def bench_build() -> None:
    print("build: Cluster(nodes, [4-level Topology]): sort, capacity matrices, usable mask, domain trees")
    print("  wall-clock median (best) and process CPU time median; on a busy machine trust the CPU time")
    print(f"  {'nodes':>7}  {'from NodeInfo':>30}  {'from Kubernetes dicts':>30}")
    for size in SIZES:
        nodes, topology = synth_nodes(size), [synth_topology()]
        objects = ClusterObjects.from_objects(synth_cluster_objects(size))
        figures = []
        for build, repeat in ((lambda: Cluster(nodes, topology), 5), (lambda: Cluster.from_objects(objects), 3)):
            wall, cpu = timed(build, repeat), timed(build, repeat, time.process_time)
            figures.append(f"{_ms(wall)}, cpu {statistics.median(cpu) * 1000:.0f} ms")
        print(f"  {size:>7,}  {figures[0]:>30}  {figures[1]:>30}")


def _ms(times: list[float]) -> str:
    return f"{statistics.median(times) * 1000:.0f} ms ({min(times) * 1000:.0f} ms)"


def bench_counts() -> None:
    size = 16_384
    cluster = busy_cluster(size)
    tree = cluster.topology("default")
    request = cluster.resources.vector({"cpu": 8_000, "memory": 64 * 2**30, GPU: 4, "pods": 1})
    usable = cluster.usable(PodPlacementRules())
    free = cluster.free

    def counts():
        return sum_by_level(tree, pods_per_node(free, request, usable))

    start = time.perf_counter()
    counts()                                 # first call also builds the tree's cached grouping
    cold = time.perf_counter() - start
    per_call = timed(counts, 2000)
    per_node = pods_per_node(free, request, usable)
    segments = timed(lambda: segments_by_level(tree, per_node, tree.level_index("rack"), 4), 2000)
    hops = timed(lambda: hop_distances(tree, tree.depth, 123), 500)
    domains = ", ".join(f"{tree.domain_count(level):,} {level_name}"
                        for level, level_name in enumerate(("zones", "blocks", "racks", "hosts")))
    print(f"\ncounts over {size:,} nodes ({domains}), request 4 GPUs + 8 cpu + 64Gi:")
    print(f"  pods_per_node + sum_by_level, all levels: median {statistics.median(per_call) * 1e6:.0f} us, "
          f"p99 {np.percentile(per_call, 99) * 1e6:.0f} us, first call {cold * 1e6:.0f} us")
    print(f"  segments_by_level (segments of 4 per rack):  median {statistics.median(segments) * 1e6:.0f} us")
    print(f"  hop_distances from one node to all:          median {statistics.median(hops) * 1e6:.0f} us")


def bench_memory() -> None:
    size = 65_536
    nodes, topology = synth_nodes(size), [synth_topology()]
    gc.collect()
    tracemalloc.start()
    cluster = Cluster(nodes, topology)
    sum_by_level(cluster.topology("default"), cluster.free[:, 0])       # include the cached grouping
    model_bytes, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    tree = cluster.topology("default")
    matrix_bytes = cluster.capacity.nbytes()
    tree_bytes = tree.member.nbytes + sum(a.nbytes for a in tree.node_domain) + sum(a.nbytes for a in tree.parent)
    mib = 2**20
    print(f"\nmemory for {size:,} nodes, {len(cluster.resources)} resources, one 4-level topology:")
    print(f"  numpy arrays: capacity matrices (allocatable, used, reserved, free) {matrix_bytes / mib:.1f} MiB, "
          f"tree arrays {tree_bytes / mib:.1f} MiB")
    print(f"  whole model allocated by Cluster(...) (tracemalloc: arrays, domain ids, indexes, usable mask; "
          f"not the NodeInfo inputs): {model_bytes / mib:.1f} MiB (peak while building {peak / mib:.1f} MiB)")


if __name__ == "__main__":
    bench_build()
    bench_counts()
    bench_memory()
