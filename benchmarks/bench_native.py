"""Side by side with native topology scheduling, on a real control plane with the v1.36 gates on: the same
gangs through (a) kube-scheduler's own TopologyAwareWorkloadScheduling (native PodGroups, `default-scheduler`,
no extender), (b) our profile (`tas-scheduler` + the extender) and (c) the same native PodGroups through a
kube-scheduler that calls a do-nothing extender (benchmarks/null_extender_stack.py: the first candidate, on the
service's own uvicorn stack), in the same run, rounds alternating. (c) is the ceiling for any filtering
extender on gangs with a native topology key: kube-scheduler calls the extender for every member in every
domain with room, whatever the extender answers.

    TAS_K8S_ASSETS=/path/to/kubernetes/binaries python benchmarks/bench_native.py [--nodes 256] [--gangs 24]
        [--kinds native,null,ours]

Workloads (each gang `--pods` pods of 8 GPUs, created by 8 threads at once):
- `block`: one required block per gang. Native: a PodGroup with the block key. Ours: the same PodGroup.
- `rack`: gangs of 8 that must share a rack. Native: a PodGroup with the rack key. Ours: the same.
- `segments` (native cannot express): one block per gang, and segments of 4 pods each in one rack. Native:
  the PodGroup with the block key only (it has no segments). Ours: a KAI PodGroup with one SubGroup per
  segment (minMember 4, rack required) inside the block.
Figures per kind: pods/s (first create to last binding of the round), create-to-all-bound span per gang
(first create of the gang to its last binding; mean and worst), gangs placed, racks per gang and per
segment (mean), constraint violations (a gang over more than its domain, a segment over more than a rack,
a node over its GPUs). Other work shares this machine: compare the kinds within one run only.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "e2e"), str(ROOT / "benchmarks")]

from bench_e2e import SCHEDULER, BindingWatch, clear, create_pods, layout, start_schedulers  # noqa: E402
from cluster import GPU, LEVELS, E2ECluster  # noqa: E402
from controlplane import ControlPlane, find_binaries  # noqa: E402

ZONE, BLOCK, RACK, HOST = LEVELS
SEGMENT = 4
WORKLOADS = {"block": (BLOCK, None), "rack": (RACK, None), "segments": (BLOCK, RACK)}
EXPRESSIBLE = {"block": True, "rack": True, "segments": False}
KINDS = {"native": "native (no extender)", "null": "native + do-nothing extender", "ours": "tas-scheduler + extender"}
SCHEDULER_OF = {"native": "default-scheduler", "null": SCHEDULER["null"], "ours": "tas-scheduler"}


def native_podgroup(name: str, pods: int, key: str) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": pods}},
                     "schedulingConstraints": {"topology": [{"key": key}]}}}


def kai_podgroup(name: str, pods: int) -> dict:
    """Our segments: one SubGroup per SEGMENT pods, each in one rack, the whole gang in one block."""
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": name},
            "spec": {"minMember": pods, "topologyConstraint": {"topology": "e2e", "requiredTopologyLevel": "block"},
                     "subGroups": [{"name": f"s{s}", "minMember": SEGMENT, "topologyConstraint": {
                         "topology": "e2e", "requiredTopologyLevel": "rack"}} for s in range(pods // SEGMENT)]}}


def pod(name: str, gang: str, segment: int, kind: str, workload: str) -> dict:
    metadata: dict = {"name": name, "labels": {"bench": "native", "segment": str(segment)}}
    spec: dict = {"containers": [{"name": "main", "image": "busybox:1.36", "resources": {"limits": {GPU: "8"}}}]}
    if kind == "ours" and workload == "segments":
        metadata["annotations"] = {"pod-group-name": gang}
        metadata["labels"]["kai.scheduler/subgroup-name"] = f"s{segment}"
    else:
        spec["schedulingGroup"] = {"podGroupName": gang}
    spec["schedulerName"] = SCHEDULER_OF[kind]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def run_round(cluster: E2ECluster, namespace: str, kind: str, workload: str, gangs: int, pods: int) -> dict:
    key, _ = WORKLOADS[workload]
    cluster.create_namespace(namespace)
    groups = [kai_podgroup(f"gang-{g}", pods) if kind == "ours" and workload == "segments"
              else native_podgroup(f"gang-{g}", pods, key) for g in range(gangs)]
    cluster.apply(groups, namespace=namespace)
    time.sleep(1)                               # the watches have the PodGroups before their pods
    objects = [pod(f"p-{g}-{i}", f"gang-{g}", i // SEGMENT, kind, workload) for g in range(gangs) for i in range(pods)]
    bindings = BindingWatch(cluster, namespace, len(objects))
    before = verb_totals(cluster)
    started, created_at = create_pods(cluster, namespace, objects)
    try:
        bound_at = bindings.wait(timeout=180)
    except TimeoutError:
        bound_at = dict(bindings.bound_at)
    elapsed = (max(bound_at.values()) if bound_at else time.monotonic()) - started
    placed = [g for g in range(gangs) if all(f"p-{g}-{i}" in bound_at for i in range(pods))]
    spans = [max(bound_at[f"p-{g}-{i}"] for i in range(pods)) - min(created_at[f"p-{g}-{i}"] for i in range(pods))
             for g in placed]
    where = placement(cluster, namespace)
    after = verb_totals(cluster)
    calls = ", ".join(f"{verb} {after[verb][1] - before.get(verb, (0, 0))[1]:.0f} calls, mean "
                      f"{1000 * (after[verb][0] - before.get(verb, (0, 0))[0]) / max(1, after[verb][1] - before.get(verb, (0, 0))[1]):.1f} ms"
                      for verb in sorted(after) if after[verb][1] > before.get(verb, (0, 0))[1])
    return {"calls": calls, "pods_per_second": len(bound_at) / elapsed if elapsed > 0 else 0.0, "placed": len(placed),
            "span_mean": statistics.mean(spans) if spans else float("nan"), "span_worst": max(spans, default=float("nan")),
            **locality(where, gangs, pods, workload)}


def verb_totals(cluster: E2ECluster) -> dict[str, tuple[float, float]]:
    """(seconds, calls) per extender verb, from the service's tas_extender_request_seconds."""
    totals: dict[str, list[float]] = {}
    for line in cluster.metrics().splitlines():
        for part, index in (("_sum{", 0), ("_count{", 1)):
            if line.startswith("tas_extender_request_seconds" + part):
                verb = line.split('verb="', 1)[1].split('"', 1)[0]
                totals.setdefault(verb, [0.0, 0.0])[index] += float(line.rsplit(" ", 1)[1])
    return {verb: (total, count) for verb, (total, count) in totals.items()}


def placement(cluster: E2ECluster, namespace: str) -> dict[str, dict[str, str]]:
    """Each bound pod's name -> its node's labels."""
    labels = {n.metadata.name: n.metadata.labels for n in cluster.core.list_node().items}
    return {p.metadata.name: labels[p.spec.node_name] for p in cluster.pods(namespace) if p.spec.node_name}


def locality(where: dict[str, dict[str, str]], gangs: int, pods: int, workload: str) -> dict:
    key, segment_key = WORKLOADS[workload]
    racks_per_gang, racks_per_segment, violations = [], [], 0
    per_node: dict[str, int] = {}
    for labels in where.values():
        per_node[labels[HOST]] = per_node.get(labels[HOST], 0) + 8
    violations += sum(used > 8 for used in per_node.values())
    for g in range(gangs):
        members = [where[f"p-{g}-{i}"] for i in range(pods) if f"p-{g}-{i}" in where]
        if not members:
            continue
        racks_per_gang.append(len({m[RACK] for m in members}))
        violations += len({m[key] for m in members}) > 1
        for s in range(pods // SEGMENT):
            segment = [where[f"p-{g}-{i}"] for i in range(s * SEGMENT, (s + 1) * SEGMENT) if f"p-{g}-{i}" in where]
            if segment:
                racks_per_segment.append(len({m[RACK] for m in segment}))
                if segment_key:
                    violations += len({m[segment_key] for m in segment}) > 1
    return {"racks_per_gang": statistics.mean(racks_per_gang) if racks_per_gang else float("nan"),
            "racks_per_segment": statistics.mean(racks_per_segment) if racks_per_segment else float("nan"),
            "violations": violations}


def table(results: dict[tuple[str, str], list[dict]]) -> str:
    head = ("workload", "scheduler", "pods/s", "span mean s", "span worst s", "gangs placed", "racks/gang",
            "racks/segment", "violations")
    rows = [head]
    for (workload, kind), rounds in results.items():
        def mean(field):
            return statistics.mean(r[field] for r in rounds)
        name = workload + ("" if EXPRESSIBLE[workload] else " (native cannot express)")
        rows.append((name, KINDS[kind],
                     f"{mean('pods_per_second'):.1f}", f"{mean('span_mean'):.2f}", f"{mean('span_worst'):.2f}",
                     f"{mean('placed'):.1f}", f"{mean('racks_per_gang'):.2f}", f"{mean('racks_per_segment'):.2f}",
                     f"{mean('violations'):.1f}"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    lines = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=256, help="GPU nodes, 8 GPUs each")
    parser.add_argument("--gangs", type=int, default=0, help="gangs per round (default: half the cluster)")
    parser.add_argument("--pods", type=int, default=16, help="pods per gang (block and segments), 8 GPUs each")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of each kind per workload")
    parser.add_argument("--verbose", action="store_true", help="each round's extender and scheduler latencies")
    parser.add_argument("--workloads", default="block,rack,segments", help="comma-separated: block, rack, segments")
    parser.add_argument("--kinds", default="native,null,ours", help="comma-separated: " + ", ".join(KINDS))
    args = parser.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        parser.error(f"--workloads {','.join(unknown)}: valid: {', '.join(WORKLOADS)}")
    kinds = [k for k in args.kinds.split(",") if k]
    if not kinds or any(k not in KINDS for k in kinds):
        parser.error(f"--kinds {args.kinds}: valid: {', '.join(KINDS)}")
    if args.pods % SEGMENT or args.pods < SEGMENT:
        parser.error(f"--pods {args.pods}: expected a multiple of {SEGMENT}")
    binaries, reason = find_binaries()
    if reason:
        print(f"bench_native: {reason}", file=sys.stderr)
        return 2
    results: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-native-") as folder:
        plane = ControlPlane(binaries, Path(folder), gates=True).start()
        cluster = None
        try:
            cluster = E2ECluster(plane, direct=True).install()
            cluster.add_gpu_nodes(layout(0, args.nodes), taint=False)
            if "null" in kinds:
                start_schedulers(cluster, ["null"])
            n = 0
            for workload in workloads:
                pods = 8 if workload == "rack" else args.pods
                gangs = args.gangs or max(1, args.nodes // (2 * pods))
                for kind in (kinds + kinds[::-1]) * args.rounds:
                    if len(results.get((workload, kind), [])) >= args.rounds or (kind == "null" and workload == "segments"):
                        continue            # the do-nothing extender places no segments: nothing to compare
                    namespace = f"bench-{n}"
                    n += 1
                    result = run_round(cluster, namespace, kind, workload, gangs, pods)
                    results.setdefault((workload, kind), []).append(result)
                    print(f"  {workload:9} {kind:6} {gangs} gangs x {pods}: {result['pods_per_second']:.1f} pods/s, "
                          f"span {result['span_mean']:.2f} s (worst {result['span_worst']:.2f}), placed "
                          f"{result['placed']}, racks/gang {result['racks_per_gang']:.2f}, racks/segment "
                          f"{result['racks_per_segment']:.2f}, violations {result['violations']}", flush=True)
                    if args.verbose:
                        print(f"      extender: {result['calls']}", flush=True)
                    clear(cluster, namespace)
            print(f"\n{args.nodes} nodes, gates on (v1.36.2); means over {args.rounds} round(s) per kind:\n")
            print(table({key: results[key] for key in sorted(results, key=lambda k: (workloads.index(k[0]),
                                                                                     list(KINDS).index(k[1])))}))
        finally:
            if cluster is not None:
                cluster.stop()
            plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
