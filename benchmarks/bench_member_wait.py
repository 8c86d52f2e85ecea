"""Where PodGroups are not served: three ways to keep a gang's first pods from being placed before the rest
exist, on a real control plane with the native gates off, in the same run, rounds rotating (issue 30 item 3).

    TAS_K8S_ASSETS=/work/k8s python benchmarks/bench_member_wait.py [--nodes 256] [--pods 256] [--gang 16]

- `held`: today's default. A member's filter call waits while the gang's pods keep appearing, at most 5 ms
  (`--member-wait 0.25`, capped by app/scheduling/member_wait.py), then is refused "waiting for N more pods".
- `refuse`: refuse-and-wake (`--member-wait 0`): refused at once; kube-scheduler retries after its backoff.
- `gates`: scheduling gates. Each pod is created with a `schedulingGates` entry (as a webhook would add it),
  and a releaser removes it from every pod of a gang once all its pods exist, one PATCH per pod (as the
  service would; here the benchmark does it, from its own watch). kube-scheduler never sees an incomplete
  gang. The extender runs with `--member-wait 0` (nothing is ever held).
Each round creates `--pods` pods (1 GPU each) in KAI PodGroups of `--gang` pods that must share one block,
by 8 threads, the gangs' pods interleaved (pod 0 of every gang, then pod 1, ...), so that each gang's pods
arrive spread over the whole round, as several controllers creating at once do (`--arrival grouped`: each
gang's pods one after another, as one controller creating a gang in a burst does). Figures per option: pods/s
(first create to last binding), the span per gang (its first create to its last binding; mean and worst),
the lag per gang (its last create to its last binding: what the option adds once the gang is complete),
kube-scheduler's loop time spent in held calls (the service's tas_extender_member_wait_seconds), the filter
calls, and the refusals of an incomplete gang. The extender is restarted between options (a few seconds,
not timed). Other work shares this machine: compare the options within one run only.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "e2e"), str(ROOT / "benchmarks")]

from bench_e2e import BindingWatch, clear, create_pods, layout, pod  # noqa: E402
from cluster import E2ECluster, PodSink  # noqa: E402
from controlplane import ControlPlane, find_binaries  # noqa: E402

OPTIONS = {"held": ("--member-wait", "0.25"), "refuse": ("--member-wait", "0"), "gates": ("--member-wait", "0")}
GATE = "bench.tas-extender.io/gang-members"


class GateReleaser(PodSink):
    """Removes the gate from every pod of a gang once all `size` of its pods exist (one PATCH each)."""

    def __init__(self, cluster: E2ECluster, namespace: str, size: int):
        self.cluster, self.namespace, self.size = cluster, namespace, size
        self.seen: dict[str, set[str]] = {}
        self.lock = threading.Lock()
        self.threads = ThreadPoolExecutor(8)
        self.patches = 0
        cluster.pod_sinks.add(self)

    def apply(self, kind, event, obj) -> None:
        metadata = obj.get("metadata") or {}
        if event != "ADDED" or metadata.get("namespace") != self.namespace:
            return
        gang = (metadata.get("annotations") or {}).get("pod-group-name")
        with self.lock:
            members = self.seen.setdefault(gang, set())
            members.add(metadata["name"])
            ready = len(members) == self.size
        if ready:
            for name in sorted(members):
                self.threads.submit(self._release, name)

    def _release(self, name: str) -> None:
        self.cluster.core.patch_namespaced_pod(name, self.namespace, [
            {"op": "remove", "path": "/spec/schedulingGates"}])
        self.patches += 1

    def close(self) -> None:
        self.cluster.pod_sinks.remove(self)
        self.threads.shutdown(wait=True)


def service_totals(cluster: E2ECluster) -> dict[str, float]:
    totals = {"held_seconds": 0.0, "filter_calls": 0.0, "waiting_refusals": 0.0}
    for line in cluster.metrics().splitlines():
        if line.startswith("tas_extender_member_wait_seconds_sum"):
            totals["held_seconds"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("tas_extender_request_seconds_count{") and 'verb="filter"' in line:
            totals["filter_calls"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("tas_extender_refusals_total") or line.startswith("tas_extender_member_waits_total"):
            pass
    return totals


def run_round(cluster: E2ECluster, namespace: str, option: str, pods: int, gang: int, interleaved: bool) -> dict:
    cluster.create_namespace(namespace)
    gangs = pods // gang
    cluster.apply([{"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": f"gang-{g}"},
                    "spec": {"minMember": gang, "topologyConstraint": {"topology": "e2e", "requiredTopologyLevel": "block"}}}
                   for g in range(gangs)], namespace=namespace)
    time.sleep(1)                              # the extender's watch has the PodGroups before their pods
    objects = []
    order = [(g, i) for i in range(gang) for g in range(gangs)] if interleaved else \
        [(g, i) for g in range(gangs) for i in range(gang)]
    for g, i in order:
        obj = pod(f"p-{g}-{i}", "tas-scheduler", f"gang-{g}")
        if option == "gates":
            obj["spec"]["schedulingGates"] = [{"name": GATE}]
        objects.append(obj)
    releaser = GateReleaser(cluster, namespace, gang) if option == "gates" else None
    bindings = BindingWatch(cluster, namespace, len(objects))
    before = service_totals(cluster)
    started, created = create_pods(cluster, namespace, objects)
    try:
        bound = bindings.wait(timeout=300)
    finally:
        if releaser is not None:
            releaser.close()
    elapsed = max(bound.values()) - started
    after = service_totals(cluster)
    spans = [max(bound[f"p-{g}-{i}"] for i in range(gang)) - min(created[f"p-{g}-{i}"] for i in range(gang))
             for g in range(gangs)]
    lags = [max(bound[f"p-{g}-{i}"] for i in range(gang)) - max(created[f"p-{g}-{i}"] for i in range(gang))
            for g in range(gangs)]
    return {"pods/s": pods / elapsed, "span mean s": statistics.mean(spans), "span worst s": max(spans),
            "lag mean s": statistics.mean(lags), "lag worst s": max(lags),
            "held ms": 1000 * (after["held_seconds"] - before["held_seconds"]),
            "filter calls": after["filter_calls"] - before["filter_calls"],
            "gate patches": releaser.patches if releaser is not None else 0}


def switch(cluster: E2ECluster, option: str) -> None:
    """Restart the extender with the option's settings (not timed)."""
    extender = cluster.extender
    extender.extra_args = tuple(a for a in cluster.extender_args) + OPTIONS[option]
    extender.stop()
    for replica in extender.replicas:
        extender.start(replica)
    extender.wait_leader(timeout=120)
    time.sleep(2)                              # the first sync done and the watches caught up


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=256, help="GPU nodes, 8 GPUs each")
    parser.add_argument("--pods", type=int, default=256, help="pods per round, 1 GPU each")
    parser.add_argument("--gang", type=int, default=16, help="pods per gang (one block required)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each option")
    parser.add_argument("--options", default=",".join(OPTIONS), help="comma-separated: " + ", ".join(OPTIONS))
    parser.add_argument("--arrival", choices=("interleaved", "grouped"), default="interleaved",
                        help="interleaved: pod i of every gang, then pod i + 1; grouped: each gang's pods together")
    args = parser.parse_args()
    options = [o for o in args.options.split(",") if o]
    if not options or any(o not in OPTIONS for o in options) or args.pods % args.gang:
        parser.error(f"--options from {', '.join(OPTIONS)}; --pods a multiple of --gang")
    binaries, reason = find_binaries()
    if reason:
        print(f"bench_member_wait: {reason}", file=sys.stderr)
        return 2
    results: dict[str, list[dict]] = {o: [] for o in options}
    with tempfile.TemporaryDirectory(prefix="bench-member-wait-") as folder:
        plane = ControlPlane(binaries, Path(folder)).start()
        cluster = None
        try:
            cluster = E2ECluster(plane, direct=True).install()
            cluster.add_gpu_nodes(layout(0, args.nodes))
            order = [o for n in range(args.rounds) for o in (options if n % 2 == 0 else options[::-1])]
            current = None
            for n, option in enumerate(order):
                if OPTIONS[option] != (OPTIONS[current] if current else None):
                    switch(cluster, option)
                current = option
                namespace = f"bench-{n}"
                result = run_round(cluster, namespace, option, args.pods, args.gang, args.arrival == "interleaved")
                results[option].append(result)
                print(f"  round {n + 1} {option:7} " + ", ".join(f"{k} {v:.2f}" for k, v in result.items()), flush=True)
                clear(cluster, namespace)
        finally:
            if cluster is not None:
                cluster.stop()
            plane.stop()
    print(f"\n{args.nodes} nodes, {args.pods} pods in gangs of {args.gang} (one block), pods {args.arrival}; "
          f"means over {args.rounds} round(s):\n")
    head = ["option", *next(iter(results.values()))[0]]
    rows = [head] + [[o, *(f"{statistics.mean(r[k] for r in results[o]):.2f}" for k in head[1:])] for o in options]
    print("\n".join("| " + " | ".join(row) + " |" for row in rows[:1] + [["---"] * len(head)] + rows[1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
