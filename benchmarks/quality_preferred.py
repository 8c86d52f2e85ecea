"""Preferred levels on a nearly full cluster (issue 34 part 4): a replay shaped like Kueue's own TAS
performance workload (test/performance/scheduler/configs/tas), scaled down to 3 racks x 2 nodes x 20 CPU.

    python benchmarks/quality_preferred.py [--seeds 1-5] [--jobs 300]

Classes, as in Kueue's generator: small (4 pods x 2 CPU), medium (8 pods x 3 CPU) and large (16 pods x
2 CPU) jobs, each with the rack required, preferred, or sliced (slices of 4 pods, each slice in one rack),
arriving so the offered load is about 1.3x the cluster. Printed per seed and policy (tas, kueue-bestfit):
the share of the preferred-rack jobs of each class that were placed inside one rack in each policy's own
trace run; then the same question asked of both planners on the same snapshots (at every attempt of
tas's run), free of the two runs' diverging histories.
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from app.offline.policies import get_policy  # noqa: E402
from app.offline.simulate import Simulation  # noqa: E402
from app.offline.trace import parse_trace  # noqa: E402
from topology.cluster import Cluster  # noqa: E402
from topology.objects import ClusterObjects  # noqa: E402

RACK, HOST = "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
CLASSES = {"small": (4, "2"), "medium": (8, "3"), "large": (16, "2")}
DURATION = {"small": 10, "medium": 15, "large": 20}
POLICIES = ("tas", "kueue-bestfit")


def cluster_objects() -> list[dict]:
    objects = []
    for rack in range(3):
        for node in range(2):
            name = f"rack-{rack}-node-{node}"
            objects.append({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": {RACK: f"rack-{rack}", HOST: name}},
                            "status": {"allocatable": {"cpu": "20", "memory": "256Gi", "pods": "110"},
                                       "conditions": [{"type": "Ready", "status": "True"}]}})
    objects.append({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology", "metadata": {"name": "default"},
                    "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": HOST}]}})
    return objects


def job(name: str, klass: str, mode: str) -> dict:
    pods, cpu = CLASSES[klass]
    annotations = {"kueue.x-k8s.io/podset-required-topology": RACK} if mode == "required" else \
        {"kueue.x-k8s.io/podset-preferred-topology": RACK} if mode == "preferred" else \
        {"kueue.x-k8s.io/podset-slice-required-topology": RACK, "kueue.x-k8s.io/podset-slice-size": "4"}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "perf", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                     "template": {"metadata": {"annotations": annotations},
                                  "spec": {"containers": [{"name": "c", "image": "x",
                                                           "resources": {"requests": {"cpu": cpu}}}]}}}}


def trace(seed: int, jobs: int) -> list[str]:
    rng = random.Random(seed)
    lines, now = [], 0.0
    for i in range(jobs):
        klass = rng.choice(("small", "small", "medium", "large"))
        mode = rng.choice(("required", "preferred", "sliced"))
        pods, cpu = CLASSES[klass]
        duration = DURATION[klass] * rng.uniform(0.8, 1.2)
        now += pods * int(cpu) * duration / (1.3 * 120) * rng.uniform(0.5, 1.5)
        lines.append(orjson.dumps({"at": round(now, 2), "duration": round(duration, 2),
                                   "workload": job(f"{klass}-{mode}-{i:04d}", klass, mode)}).decode())
    return lines


def in_one_rack(result, cluster) -> dict[str, tuple[int, int]]:
    """Per class: (preferred-rack jobs placed inside one rack, preferred-rack jobs placed)."""
    tree = cluster.topologies["default"]
    counts = {klass: [0, 0] for klass in CLASSES}
    for sim_job in result.jobs:
        name = sim_job.key.split("/", 1)[1]
        klass, mode = name.split("-")[:2]
        if mode != "preferred" or sim_job.placed is None:
            continue
        racks = {int(tree.node_domain[0][node]) for plan in sim_job.plans for node in plan.slots.values()}
        counts[klass][1] += 1
        counts[klass][0] += len(racks) == 1
    return {klass: (a, b) for klass, (a, b) in counts.items()}


class SameSnapshots:
    """tas's trace run, asking kueue-bestfit the same question on the same free capacity at each attempt:
    per class, preferred-rack jobs both placed, and how many each kept in one rack."""

    name, description = "tas", "tas, with kueue-bestfit asked the same question"

    def __init__(self) -> None:
        self.ours, self.theirs = get_policy("tas"), get_policy("kueue-bestfit")
        self.counts = {klass: [0, 0, 0] for klass in CLASSES}      # both placed, tas in one rack, kueue in one

    def view(self, cluster, gangs) -> bytes:
        return self.ours.view(cluster, gangs) + b"/" + self.theirs.view(cluster, gangs)

    def place(self, cluster, tree, explain=True):
        plan, other = self.ours.place(cluster, tree, explain), self.theirs.place(cluster, tree, explain)
        klass, mode = (tree.workload or tree.name).split("/")[-1].split("-")[:2]
        if mode == "preferred" and klass in CLASSES and plan.placed and other.placed:
            owners = cluster.topologies["default"].node_domain[0]
            counts = self.counts[klass]
            counts[0] += 1
            counts[1] += len({int(owners[n]) for n in plan.slots.values()}) == 1
            counts[2] += len({int(owners[n]) for n in other.slots.values()}) == 1
        return plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-5")
    parser.add_argument("--jobs", type=int, default=300)
    args = parser.parse_args()
    first, _, last = args.seeds.partition("-")
    seeds = range(int(first), int(last or first) + 1)
    print("preferred-rack jobs placed inside one rack, per class: tas vs kueue-bestfit")
    print("| seed | " + " | ".join(CLASSES) + " |")
    print("|---" * (len(CLASSES) + 1) + "|")
    totals = {p: {k: [0, 0] for k in CLASSES} for p in POLICIES}
    for seed in seeds:
        lines = trace(seed, args.jobs)
        shares = {}
        for policy in POLICIES:
            cluster = Cluster.from_objects(ClusterObjects.from_objects(cluster_objects()))
            result = Simulation(cluster, get_policy(policy), parse_trace(lines)).run()
            shares[policy] = in_one_rack(result, cluster)
            for klass, (a, b) in shares[policy].items():
                totals[policy][klass][0] += a
                totals[policy][klass][1] += b
        print(f"| {seed} | " + " | ".join(" vs ".join(_share(*shares[p][k]) for p in POLICIES) for k in CLASSES) + " |")
    print("| **all** | " + " | ".join(" vs ".join(_share(*totals[p][k]) for p in POLICIES) for k in CLASSES) + " |")
    print("\nsame snapshots (tas's run, kueue-bestfit asked the same question at each attempt): preferred-rack "
          "jobs both placed, kept in one rack by tas vs kueue-bestfit")
    same = {klass: [0, 0, 0] for klass in CLASSES}
    for seed in seeds:
        side = SameSnapshots()
        cluster = Cluster.from_objects(ClusterObjects.from_objects(cluster_objects()))
        Simulation(cluster, side, parse_trace(trace(seed, args.jobs))).run()
        for klass, counts in side.counts.items():
            same[klass] = [a + b for a, b in zip(same[klass], counts)]
    print("| class | both placed | tas in one rack | kueue-bestfit in one rack |")
    print("|---|---|---|---|")
    for klass, (both, ours, theirs) in same.items():
        print(f"| {klass} | {both} | {ours} | {theirs} |")


def _share(kept: int, placed: int) -> str:
    return f"{100 * kept / placed:.1f}% of {placed}" if placed else "-"


if __name__ == "__main__":
    main()
