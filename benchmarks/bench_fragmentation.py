"""The cost of the fragmentation gauges at a Prometheus scrape (issue 34 part 1).

    python benchmarks/bench_fragmentation.py                 # 16,384 nodes
    python benchmarks/bench_fragmentation.py --nodes 65536

A service state on a synthetic cluster (zones > blocks > racks > nodes of 8 GPUs, benchmarks/synth.py)
with a random 40% of the nodes partly or wholly used. Printed side by side in the same run:
- the measure itself (whole free domains per level and the largest gang of two shapes per level, every
  topology), computed from scratch as after every cluster change;
- a whole /metrics render with the cluster changed before each scrape (the measure recomputed), and
  unchanged (the measure served from its per-generation cache);
- the reference: the same /metrics render without the fragmentation gauges.
Target: a scrape at 16,384 nodes costs <= 20 ms.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synth import GPU, synth_cluster_objects  # noqa: E402
from app import metrics as metrics_module  # noqa: E402
from app.fragmentation import measure_cluster, shapes_for  # noqa: E402
from app.state import ServiceState  # noqa: E402
from app.state.service import kind_of  # noqa: E402


def busy_state(nodes: int, seed: int = 7) -> ServiceState:
    state = ServiceState()
    objects = synth_cluster_objects(nodes)
    for kind in {kind_of(o) for o in objects}:
        state.replace(kind, [o for o in objects if kind_of(o) == kind])
    state.synced()
    cluster = state.cluster
    rng = np.random.default_rng(seed)
    gpu = cluster.resources.column[GPU]
    used = rng.integers(1, 9, size=nodes) * (rng.random(nodes) < 0.4)
    cluster.capacity.used[:, gpu] = used
    cluster.capacity.free[:, gpu] -= used
    return state


def timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def ms(times: list[float]) -> str:
    return f"median {statistics.median(times) * 1000:6.2f} ms, p90 {sorted(times)[int(len(times) * 0.9)] * 1000:6.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16_384)
    parser.add_argument("--repeat", type=int, default=40)
    args = parser.parse_args()
    state = busy_state(args.nodes)
    cluster = state.cluster
    shapes = shapes_for(cluster)
    print(f"{args.nodes:,} nodes, {len(cluster.topologies)} topology, shapes {', '.join(s.name for s in shapes)}")
    measure = timed(lambda: measure_cluster(cluster, shapes), args.repeat)

    def changed_scrape():
        state.generation += 1              # as after a pod event: the cache misses
        state.metrics.render()

    changed = timed(changed_scrape, args.repeat)
    unchanged = timed(state.metrics.render, args.repeat)
    reference = ServiceState()             # the same collectors without the fragmentation gauges
    reference._cluster = cluster
    original = metrics_module.GaugeCache.get
    metrics_module.GaugeCache.get = lambda self, state: ([], [])
    try:
        without = timed(reference.metrics.render, args.repeat)
    finally:
        metrics_module.GaugeCache.get = original
    print(f"  the measure, from scratch              {ms(measure)}")
    print(f"  /metrics, cluster changed (recomputed) {ms(changed)}")
    print(f"  /metrics, unchanged (cached)           {ms(unchanged)}")
    print(f"  /metrics without the gauges (reference) {ms(without)}")
    print(f"  target: a scrape <= 20 ms -> {'met' if statistics.median(changed) <= 0.020 else 'MISSED'}")


if __name__ == "__main__":
    main()
