"""Planner speed: median time per plan for the issue's two reference gangs, and how it grows with
nodes and with pods. Run: python benchmarks/bench_planner.py [--quick]; `--oracle N` instead checks N seeded
random instances against the brute force (the long run of tests/topology/test_planner_complete.py); `--siblings N`
checks N instances of tests/topology/test_planner_elastic_siblings.py's property (seed 2015) and lists the ones
keeping fewer pods in their subgroup's rack than the brute force."""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from topology.cluster import Cluster
from topology.groups import Group, GroupTree, RoleSpec, SegmentInfo, Slot
from topology.nodes import NodeInfo
from topology.plan import PlanInput
from topology.planner import build_plan_input, plan_gang
from topology.resources import ResourceIndex
from topology.tree import Level, TopologyTree

GPU = "nvidia.com/gpu"
RESOURCES = ResourceIndex([GPU])


def cluster(zones: int, blocks: int, racks: int, nodes: int, busy: float = 0.25, seed: int = 1):
    """zones x blocks x racks x nodes of 8 GPUs, 4 levels (zone, block, rack, host); `busy` of the
    nodes run a 4-GPU pod of some other gang."""
    paths = []
    for z in range(zones):
        for b in range(blocks):
            for r in range(racks):
                for n in range(nodes):
                    rack = f"z{z}-b{b}-r{r}"
                    paths.append((f"z{z}", f"z{z}-b{b}", rack, f"{rack}-n{n}"))
    names = [p[3] for p in paths]
    levels = [Level("topology.kubernetes.io/zone", "zone"), Level("example.com/block", "block"),
              Level("example.com/rack", "rack"), Level("kubernetes.io/hostname", "host")]
    tree = TopologyTree("bench", "bench", levels, names, paths)
    free = np.zeros((len(names), len(RESOURCES)), dtype=np.int64)
    free[:, RESOURCES.column["cpu"]] = 96_000
    free[:, RESOURCES.column["memory"]] = 1024 << 30
    free[:, RESOURCES.column["pods"]] = 110
    free[:, RESOURCES.column[GPU]] = 8
    rng = np.random.default_rng(seed)
    taken = rng.random(len(names)) < busy
    free[taken, RESOURCES.column[GPU]] -= 4
    return tree, free, taken


def job(pods: int, segment: int, segment_level="rack", job_required="zone", job_preferred="block") -> GroupTree:
    count = (pods + segment - 1) // segment
    children = [Group(f"worker-seg-{s}", slots=[Slot("worker", i) for i in range(s * segment, min(pods, (s + 1) * segment))],
                      required_level=segment_level, segment=SegmentInfo("worker", s, segment, count))
                for s in range(count)]
    root = Group("job", children=children, required_level=job_required, preferred_level=job_preferred)
    return GroupTree("bench", "job", "PyTorchJob", root, {"worker": RoleSpec("worker", pods)}, topology="bench")


def plan_input(tree: TopologyTree, free: np.ndarray, gang: GroupTree) -> PlanInput:
    request = np.zeros(len(RESOURCES), dtype=np.int64)
    request[RESOURCES.column[GPU]] = 8
    request[RESOURCES.column["cpu"]] = 8000
    request[RESOURCES.column["pods"]] = 1
    return PlanInput(tree=gang, topology=tree, free=free, resources=RESOURCES, node_names=tree.node_names,
                     requests={"worker": request}, usable={"worker": np.ones(len(free), dtype=bool)})


def measure(inp: PlanInput, runs: int) -> tuple[float, float, object]:
    start = time.perf_counter()
    plan = plan_gang(inp)                          # first plan on this topology (builds cached groupings)
    cold = time.perf_counter() - start
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        plan_gang(inp)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000, cold * 1000, plan


def report(title: str, inp: PlanInput, runs: int, target: float | None = None) -> float:
    median, cold, plan = measure(inp, runs)
    pods = len(inp.tree.slots())
    status = "" if target is None else ("  OK" if median <= target else f"  OVER {target} ms")
    print(f"{title:<58} {median:8.2f} ms median ({cold:7.1f} ms first)  placed={plan.placed} "
          f"pods={len(plan.slots)}/{pods} rank={plan.rank[:3] if plan.rank else ''}{status}")
    return median


def real_cluster(zones: int, blocks: int, racks: int, nodes: int) -> Cluster:
    """The same shape as a Cluster of NodeInfo with a KAI Topology (what the extender plans on)."""
    infos = []
    for z in range(zones):
        for b in range(blocks):
            for r in range(racks):
                for n in range(nodes):
                    name = f"z{z}-b{b}-r{r}-n{n:02d}"
                    infos.append(NodeInfo(name, {"topology.kubernetes.io/zone": f"z{z}",
                                                 "example.com/block": f"z{z}-b{b}",
                                                 "example.com/rack": f"z{z}-b{b}-r{r}",
                                                 "kubernetes.io/hostname": name},
                                          {"cpu": 96_000, "memory": 1024 << 30, GPU: 8, "pods": 110}))
    topology = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "bench"},
                "spec": {"levels": [{"nodeLabel": "topology.kubernetes.io/zone", "alias": "zone"},
                                    {"nodeLabel": "example.com/block", "alias": "block"},
                                    {"nodeLabel": "example.com/rack", "alias": "rack"},
                                    {"nodeLabel": "kubernetes.io/hostname", "alias": "host"}]}}
    return Cluster(infos, [topology])


def end_to_end(runs: int) -> None:
    cluster = real_cluster(2, 4, 16, 16)
    gang = job(128, 8)
    gang.roles["worker"].pod_spec = {"containers": [{"name": "main", "resources": {"requests": {
        "cpu": "8", "memory": "64Gi", GPU: "8"}}}]}
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        inp = build_plan_input(cluster, gang)
        built = time.perf_counter()
        plan = plan_gang(inp)
        times.append((built - start, time.perf_counter() - built))
    build = statistics.median(t[0] for t in times) * 1000
    plan_ms = statistics.median(t[1] for t in times) * 1000
    print(f"plan_for on a 2,048-node Cluster (128 pods): build_plan_input {build:.2f} ms + plan {plan_ms:.2f} ms "
          f"median, placed={plan.placed}")


def oracle(instances: int) -> int:
    """The completeness property over more seeds than CI runs: misses and broken rules, with timing; the
    same instances again with pods-per-node limits (host ports, hostname spread)."""
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from oracle import brute_force, check_plan
    from planner_cases import random_instance, random_limited_instance
    failed = False
    for what, make in (("random instances", random_instance), ("with pods-per-node limits", random_limited_instance)):
        misses, broken, feasible, planning = [], [], 0, 0.0
        for seed in range(instances):
            inp = make(seed)
            start = time.perf_counter()
            plan = plan_gang(inp)
            planning += time.perf_counter() - start
            if check_plan(inp, plan):
                broken.append(seed)
            possible = brute_force(inp) is not None
            feasible += possible
            if possible != plan.placed:
                misses.append(seed)
        print(f"{instances} {what}, {feasible} feasible: {len(misses)} misses {misses[:10]}, "
              f"{len(broken)} with broken rules {broken[:10]}; planner {planning / instances * 1000:.2f} ms mean")
        failed = failed or bool(misses or broken)
    return 1 if failed else 0


def siblings(instances: int, placed_file: str | None = None, seed: int = 2015) -> int:
    """The elastic siblings property over more instances than CI runs: the instances whose subgroups keep
    fewer pods in their own rack than the brute force (and the most any plan placing as many pods keeps),
    and the pods placed in all; `placed_file` gets each instance's pods placed, to compare versions."""
    import random
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from test_planner_elastic_siblings import (best_kept, best_kept_placing, kept_in_own_rack, random_shapes,
                                               subgroups_per_rack)
    rng = random.Random(seed)
    checked, short, placed = 0, [], []
    for index in range(instances):
        racks, per_rack = rng.randint(2, 3), rng.randint(2, 3)
        free_gpus = [rng.choice([0, 4, 8, 8, 16]) for _ in range(racks * per_rack)]
        shapes = random_shapes(rng)
        strategy = "spread" if rng.random() < 0.15 else "binpack"
        inp, plan = subgroups_per_rack(per_rack, free_gpus, shapes, strategy)
        placed.append(len(plan.slots))
        best = best_kept(per_rack, free_gpus, shapes)
        if best is None or strategy == "spread":
            continue
        checked += 1
        kept = kept_in_own_rack(inp, plan, per_rack)
        if kept < best:
            short.append((index, per_rack, free_gpus, shapes, kept, best,
                          best_kept_placing(per_rack, free_gpus, shapes, len(plan.slots))))
    for index, per_rack, free_gpus, shapes, kept, best, as_many in short:
        print(f"instance {index}: {per_rack} per rack, free {free_gpus}, {shapes}: kept {kept} of {best} "
              f"({as_many} placing as many pods)")
    if placed_file:
        Path(placed_file).write_text("".join(f"{index} {count}\n" for index, count in enumerate(placed)))
    print(f"{instances} instances, {checked} checked: {len(short)} keep fewer pods in their rack than the best; "
          f"{sum(placed)} pods placed in all")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--oracle", type=int, metavar="N", help="check N random instances against the brute force")
    parser.add_argument("--siblings", type=int, metavar="N",
                        help="check N random elastic-siblings instances against the brute force")
    parser.add_argument("--placed", metavar="FILE", help="with --siblings: write each instance's pods placed")
    args = parser.parse_args(argv)
    if args.siblings:
        return siblings(args.siblings, args.placed)
    if args.oracle:
        return oracle(args.oracle)
    runs = 10 if args.quick else 40
    print("Reference gangs (8-GPU pods, 25% of nodes half busy with other gangs):")
    tree, free, _ = cluster(2, 4, 16, 16)
    ok = report("128 pods in 16 segments of 8, 2,048 nodes", plan_input(tree, free, job(128, 8)), runs, 5.0) <= 5.0
    tree, free, _ = cluster(4, 8, 16, 32)
    ok &= report("1,024 pods in 64 segments of 16, 16,384 nodes", plan_input(tree, free, job(1024, 16)),
                 runs, 50.0) <= 50.0
    print("\nGrowth with nodes (128 pods in segments of 8):")
    print(f"{'nodes':>8} {'median ms':>10}")
    for zones, blocks, racks, nodes in ((1, 2, 16, 16), (2, 4, 16, 16), (4, 4, 16, 32), (4, 8, 16, 32)):
        tree, free, _ = cluster(zones, blocks, racks, nodes)
        median, _, _ = measure(plan_input(tree, free, job(128, 8)), runs)
        print(f"{len(free):>8} {median:>10.2f}")
    print("\nGrowth with pods (16,384 nodes, segments of 16):")
    print(f"{'pods':>8} {'median ms':>10}")
    tree, free, _ = cluster(4, 8, 16, 32)
    for pods in (32, 128, 512, 1024, 2048):
        median, _, _ = measure(plan_input(tree, free, job(pods, 16, job_required=None)), runs)
        print(f"{pods:>8} {median:>10.2f}")
    print()
    end_to_end(runs)
    print("\nA refusal (the explanation is part of the cost): 4,096 pods in one zone of 16,384 nodes")
    median, _, plan = measure(plan_input(tree, free, job(4096, 16)), max(3, runs // 4))
    print(f"{median:8.2f} ms median: {plan.reason}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
