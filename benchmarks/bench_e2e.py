"""Scheduling throughput on a real control plane: pods bound per second through kube-scheduler with the
extender (gangs) and through a plain kube-scheduler profile (the same pods, no gangs), in the same run.

    TAS_K8S_ASSETS=/path/to/kubernetes/binaries python benchmarks/bench_e2e.py [--nodes 256] [--gangs 16]

The control plane, the extender (installed from manifests/, one replica called directly rather than through
the tests' readiness proxy) and both schedulers are the end-to-end tests' harness (tests/e2e). Each gang is a KAI PodGroup of `--pods` pods of 8 GPUs that must share one block, its
pods created by 8 threads at once; the plain round creates the same number of identical pods without a
PodGroup for `default-scheduler`. Time runs from the first create to the last binding read back from the API
server. Rounds alternate (plain, gangs, gangs, plain, ...) so that a noisy neighbour hurts both. Target: the
extender path keeps at least 80% of the plain throughput at 256 nodes, every gang inside one block.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import ssl
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "e2e")]

from cluster import GPU, LEVELS, E2ECluster, PodSink, scheduler_config  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402
from controlplane import ControlPlane, find_binaries, free_port, start  # noqa: E402

NODES_PER_RACK, RACKS_PER_BLOCK, BLOCKS_PER_ZONE = 8, 4, 4


def layout(nodes: int) -> dict[str, tuple[str, str, str]]:
    out = {}
    for i in range(nodes):
        rack = i // NODES_PER_RACK
        block = rack // RACKS_PER_BLOCK
        zone = block // BLOCKS_PER_ZONE
        out[f"gpu-{i:04d}"] = (f"zone-{zone}", f"block-{block}", f"rack-{rack}")
    return out


def pod(name: str, scheduler: str, group: str | None) -> dict:
    metadata = {"name": name, "labels": {"bench": "e2e"}}
    if group:
        metadata["annotations"] = {"pod-group-name": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"schedulerName": scheduler, "containers": [{
                "name": "main", "image": "busybox:1.36", "resources": {"limits": {GPU: "8"}}}]}}


# The kinds of round: which scheduler takes the pods, and whether they come in gangs.
SCHEDULER = {"plain": "default-scheduler", "gangs": "tas-scheduler", "null": "null-scheduler"}
TITLE = {"plain": "plain default-scheduler ", "gangs": "tas-scheduler + extender",
         "null": "null-scheduler + null extender"}


def start_null_extender(cluster: E2ECluster, bind: bool, stack: bool) -> None:
    """null_extender.py and a kube-scheduler `null-scheduler` that calls its filter verb, configured as the
    shipped profile is (HTTPS, node names only, every node a candidate) but with no other verb; with `bind`,
    also its bind verb, which writes each Binding with placement annotations as the service does; with
    `stack`, null_extender_stack.py: the same answers served by uvicorn, binds through urllib3 threads."""
    plane = cluster.plane
    port = free_port()
    cert, key = plane.certs.issue("null-extender", "/CN=null-extender", server=True)
    api = [plane.server, plane.certs.ca_crt, plane.certs.folder / "admin.crt", plane.certs.folder / "admin.key"]
    script = ROOT / "benchmarks" / ("null_extender_stack.py" if stack else "null_extender.py")
    plane.processes.append(start("null-extender", [sys.executable, script, port, cert, key,
                                                   *(api if bind else [])], plane.folder))
    config = scheduler_config(f"https://127.0.0.1:{port}", plane.certs.ca_crt.read_bytes())
    config["profiles"][0]["schedulerName"] = "null-scheduler"
    for extender in config["extenders"]:
        for verb in ("prioritizeVerb", "preemptVerb", *(() if bind else ("bindVerb",))):
            extender.pop(verb, None)
    plane.start_scheduler("null-scheduler", config)


def run_round(cluster: E2ECluster, namespace: str, gangs: int, pods: int, kind: str) -> dict:
    with_extender = kind == "gangs"
    cluster.create_namespace(namespace)
    if with_extender:
        cluster.apply([{"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                        "metadata": {"name": f"gang-{g}"},
                        "spec": {"minMember": pods, "topologyConstraint": {
                            "topology": "e2e", "requiredTopologyLevel": "block"}}} for g in range(gangs)],
                      namespace=namespace)
        time.sleep(1)                          # the extender's watch has the PodGroups before their pods
    scheduler = SCHEDULER[kind]
    objects = [pod(f"p-{g}-{i}", scheduler, f"gang-{g}" if with_extender else None)
               for g in range(gangs) for i in range(pods)]
    latencies, cpu = latency_totals(cluster), cpu_seconds(cluster)
    bindings = BindingWatch(cluster, namespace, len(objects))
    created_at: dict[str, float] = {}

    def create(obj: dict) -> None:
        response = cluster.core.create_namespaced_pod(namespace, obj, _preload_content=False)
        response.drain_conn()                  # the pod as created is not read: no model to build
        response.release_conn()
        created_at[obj["metadata"]["name"]] = time.monotonic()
    started = time.monotonic()
    with ThreadPoolExecutor(8) as threads:
        list(threads.map(create, objects))
    created = time.monotonic() - started
    bound_at = bindings.wait(timeout=600)
    elapsed = max(bound_at.values()) - started
    cpu = cpu_used(cpu, cpu_seconds(cluster), elapsed)        # before the checks below read every pod
    bound = cluster.wait_bound(namespace, len(objects), timeout=60)
    result = {"pods": len(objects), "seconds": elapsed, "create_seconds": created,
              "pods_per_second": len(objects) / elapsed, "violations": 0,
              "latency": latency_means(latencies, latency_totals(cluster)), "cpu": cpu,
              "wait": waits(created_at, bound_at, gangs if with_extender else 0, pods)}
    if with_extender:
        result["violations"] = violations(cluster, bound)
    return result


class BindingWatch(PodSink):
    """When each pod of the namespace got its node: a sink of the harness's own list-and-watch of pods
    (tests/e2e/cluster.py PodSinks), added before the first create; polling would add load and up to a poll
    interval to every round. Events come as raw JSON: the client library's models would cost about as much
    CPU per event as the extender spends on it, on the cores being measured."""

    def __init__(self, cluster: E2ECluster, namespace: str, expected: int):
        self.namespace, self.expected = namespace, expected
        self.bound_at: dict[str, float] = {}
        self.done = threading.Event()
        self._sinks = cluster.pod_sinks
        self._sinks.add(self)

    def apply(self, kind, event, pod) -> None:
        metadata = pod.get("metadata") or {}
        if metadata.get("namespace") == self.namespace and (pod.get("spec") or {}).get("nodeName"):
            self._bound(metadata["name"])

    def _bound(self, name: str) -> None:
        if name not in self.bound_at:
            self.bound_at[name] = time.monotonic()
            if len(self.bound_at) >= self.expected:
                self.done.set()

    def wait(self, timeout: float) -> dict[str, float]:
        try:
            if not self.done.wait(timeout):
                raise TimeoutError(f"{len(self.bound_at)} of {self.expected} pods bound after {timeout:.0f} s")
            return self.bound_at
        finally:
            self._sinks.remove(self)


def waits(created_at: dict[str, float], bound_at: dict[str, float], gangs: int, pods: int) -> str:
    """From each pod's creation (each gang's last pod's, for gangs) to its binding: mean and worst."""
    if gangs:
        per_pod = [bound_at[f"p-{g}-{i}"] - max(created_at[f"p-{g}-{j}"] for j in range(pods))
                   for g in range(gangs) for i in range(pods)]
        what = "from the gang's last create to binding"
    else:
        per_pod = [bound_at[name] - created_at[name] for name in created_at]
        what = "from create to binding"
    return f"{what}: mean {statistics.mean(per_pod):.2f} s, worst {max(per_pod):.2f} s"


def latency_totals(cluster: E2ECluster) -> dict[str, tuple[float, float]]:
    """(sum of seconds, count) per extender verb and webhook as the extender measured them, the webhook as
    the API server waited for it (apiserver_admission_webhook_admission_duration_seconds), and each
    kube-scheduler's scheduling algorithm and filter plugins."""
    context = ssl.create_default_context(cafile=str(cluster.plane.certs.ca_crt))
    with urllib.request.urlopen(f"{cluster.url}/metrics", context=context, timeout=10) as answer:
        ours = answer.read().decode()
    theirs = cluster.plane.kubectl("get", "--raw", "/metrics")
    totals: dict[str, list[float]] = {}
    add_histogram(totals, ours, "tas_extender_request_seconds", lambda labels: labels.get("verb", ""))
    add_histogram(totals, ours, "tas_extender_planning_seconds", lambda labels: "planning " + labels.get("kind", ""))
    add_histogram(totals, theirs, "apiserver_admission_webhook_admission_duration_seconds",
                  lambda labels: "apiserver-" + labels.get("type", ""))
    add_histogram(totals, theirs, "apiserver_request_duration_seconds",   # the bind verb's write, as served
                  lambda labels: "apiserver-binding" if (labels.get("verb"), labels.get("resource"),
                                                         labels.get("subresource")) == ("POST", "pods", "binding")
                  else None)
    for scheduler in (p for p in cluster.plane.processes if p.port is not None):
        # kube-scheduler's own: its scheduling algorithm (filter plugins, extender calls, scores) and, within
        # it, the filter plugins; the cycle is serial, so its length bounds the pods scheduled per second
        text = cluster.plane.scheduler_metrics(scheduler)
        add_histogram(totals, text, "scheduler_scheduling_algorithm_duration_seconds",
                      lambda labels: f"{scheduler.name} algorithm")
        add_histogram(totals, text, "scheduler_framework_extension_point_duration_seconds",
                      lambda labels: f"{scheduler.name} filter plugins"
                      if labels.get("extension_point") == "Filter" else None)
    # counts with no time: filter calls held for their gang's pods, API requests by verb and resource
    add_counter(totals, ours, "tas_extender_member_waits_total", lambda labels: "holds " + labels.get("outcome", ""))
    add_counter(totals, theirs, "apiserver_request_total", lambda labels: (
        "requests " + labels.get("verb", "") + " " + labels.get("resource", "") +
        ("/" + labels["subresource"] if labels.get("subresource") else "")))
    return {name: (total, count) for name, (total, count) in totals.items()}


def add_histogram(totals: dict[str, list[float]], text: str, family: str, name_of) -> None:
    """Add the _sum and _count of every series of a Prometheus histogram to totals[name_of(its labels)]
    (a series whose name_of is None is left out)."""
    for line in text.splitlines():
        for part, index in (("_sum", 0), ("_count", 1)):
            head = family + part
            if line.startswith(head) and line[len(head):len(head) + 1] in ("{", " "):
                series, value = line.rsplit(" ", 1)
                name = name_of(_labels(series))
                if name is not None:
                    totals.setdefault(name, [0.0, 0.0])[index] += float(value)


def add_counter(totals: dict[str, list[float]], text: str, family: str, name_of) -> None:
    """Add every series of a Prometheus counter to the count of totals[name_of(its labels)]."""
    for line in text.splitlines():
        if line.startswith(family + "{"):
            series, value = line.rsplit(" ", 1)
            totals.setdefault(name_of(_labels(series)), [0.0, 0.0])[1] += float(value)


def _labels(series: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', series))


def cpu_seconds(cluster: E2ECluster) -> dict[str, float]:
    """CPU time (user + system) so far of each control-plane process and extender replica, and of this
    benchmark (its creates and watch run on the same cores)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"benchmark client": time.process_time()}
    for process in [*cluster.plane.processes, *(r.process for r in cluster.extender.replicas if r.process)]:
        try:
            fields = Path(f"/proc/{process.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[process.name] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return out


def cpu_used(before: dict[str, float], after: dict[str, float], elapsed: float) -> str:
    used = {name: after[name] - before.get(name, 0.0) for name in after}
    each = ", ".join(f"{name} {seconds:.2f}" for name, seconds in sorted(used.items(), key=lambda kv: -kv[1])
                     if seconds >= 0.05)
    total = sum(used.values())
    return f"{each}; all {total:.2f} in {elapsed:.2f} s: {total / elapsed:.1f} of {os.cpu_count()} cores busy"


def latency_means(before: dict, after: dict) -> str:
    out, requests, holds = [], [], []
    for name, (total, count) in sorted(after.items()):
        done = count - before.get(name, (0.0, 0.0))[1]
        if name.startswith("requests "):
            if done >= 5:
                requests.append((done, name.removeprefix("requests ")))
        elif name.startswith("holds "):
            holds.append(f"{name.removeprefix('holds ')} {done:.0f}")
        elif done:
            out.append(f"{name} {1000 * (total - before.get(name, (0.0, 0.0))[0]) / done:.1f} ms x {done:.0f}")
    busiest = ", ".join(f"{name} {done:.0f}" for done, name in sorted(requests, reverse=True)[:6])
    held = f"; filter calls held for their gang's pods (--member-wait): {', '.join(holds)}" if holds else ""
    return "; ".join(out) + held + (f"\n      API requests: {busiest}" if busiest else "")


def violations(cluster: E2ECluster, bound: list) -> int:
    """Gangs spread over more than one block, plus nodes over their 8 GPUs."""
    block_of = {n.metadata.name: n.metadata.labels[LEVELS[1]] for n in cluster.core.list_node().items}
    blocks: dict[str, set[str]] = {}
    per_node: Counter = Counter()
    for p in bound:
        blocks.setdefault(p.metadata.annotations["pod-group-name"], set()).add(block_of[p.spec.node_name])
        per_node[p.spec.node_name] += 8
    return sum(len(b) > 1 for b in blocks.values()) + sum(used > 8 for used in per_node.values())


def clear(cluster: E2ECluster, namespace: str) -> None:
    """Delete the round's namespace and wait until it is gone: the namespace controller deletes the pods
    first and the PodGroups seconds later, and a gang's plan holds its nodes until its PodGroup goes."""
    cluster.clean_namespace(namespace)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            cluster.core.read_namespace(namespace)
        except ApiException as err:
            if err.status == 404:
                time.sleep(1)                  # the extender and the schedulers see the last deletions
                return
            raise
        time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=256, help="GPU nodes, 8 GPUs each (up to 2,000)")
    parser.add_argument("--gangs", type=int, default=0, help="gangs per round (default: half the cluster)")
    parser.add_argument("--pods", type=int, default=8, help="pods per gang, 8 GPUs each")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each kind, alternating")
    parser.add_argument("--gates", action="store_true",
                        help="the control plane with the native workload scheduling gates on: gangs wait at "
                             "kube-scheduler's own gate (a native PodGroup the extender creates) instead of "
                             "the extender's filter")
    parser.add_argument("--logs", type=Path, help="copy the control plane's and the extender's logs here")
    parser.add_argument("--null-extender", action="store_true",
                        help="also rounds of the plain pods through a kube-scheduler calling null_extender.py "
                             "(a filter that keeps the first candidate): what calling any extender costs here")
    parser.add_argument("--null-bind", action="store_true",
                        help="--null-extender whose extender also binds (one Binding write per pod, with "
                             "placement annotations, as the service does): what any binding extender costs here")
    parser.add_argument("--null-stack", action="store_true",
                        help="--null-bind with the null extender on the service's stack (uvicorn, a bare ASGI "
                             "app, binds through urllib3 threads) instead of hand-written HTTP")
    args = parser.parse_args()
    if not 8 <= args.nodes <= 2000:
        parser.error(f"--nodes {args.nodes}: expected 8 to 2,000")
    gangs = args.gangs or max(1, args.nodes // (2 * args.pods))
    if gangs * args.pods > args.nodes:
        parser.error(f"--gangs {gangs} x --pods {args.pods} need more than the {args.nodes} nodes")
    binaries, reason = find_binaries()
    if reason:
        print(f"bench_e2e: {reason}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as folder:
        plane = ControlPlane(binaries, Path(folder), gates=args.gates).start()
        cluster = None
        try:
            # one replica, called directly: the tests' readiness proxy is a Python TCP relay that would cost
            # more than the extender (a real Service is forwarded by the kernel)
            cluster = E2ECluster(plane, direct=True).install()
            began = time.monotonic()
            cluster.add_gpu_nodes(layout(args.nodes))
            print(f"{args.nodes} GPU nodes added in {time.monotonic() - began:.1f} s; "
                  f"{gangs} gangs x {args.pods} pods per round (one block each) vs {gangs * args.pods} plain pods")
            args.null_bind |= args.null_stack
            with_null = args.null_extender or args.null_bind
            kinds = ["plain", "gangs"] + (["null"] if with_null else [])
            if with_null:
                start_null_extender(cluster, args.null_bind, args.null_stack)
            titles = {**TITLE, "null": TITLE["null"] + (
                " (filter, bind" + (", uvicorn)" if args.null_stack else ")") if args.null_bind else " (filter)")}
            results: dict[str, list[dict]] = {kind: [] for kind in kinds}
            order = (kinds + kinds[::-1]) * args.rounds          # plain, gangs, gangs, plain, ...
            for n, kind in enumerate(order[:len(kinds) * args.rounds]):
                namespace = f"bench-{n}"
                result = run_round(cluster, namespace, gangs, args.pods, kind)
                results[kind].append(result)
                print(f"  round {n + 1}: {titles[kind]} {result['pods']} pods in {result['seconds']:.2f} s "
                      f"({result['pods_per_second']:.1f} pods/s; created in {result['create_seconds']:.2f} s)"
                      + (f", constraint violations: {result['violations']}" if kind == "gangs" else ""))
                print(f"      mean latency: {result['latency']}")
                print(f"      CPU seconds: {result['cpu']}")
                print(f"      {result['wait']}")
                clear(cluster, namespace)
            plain = statistics.mean(r["pods_per_second"] for r in results["plain"])
            gang = statistics.mean(r["pods_per_second"] for r in results["gangs"])
            print(f"plain kube-scheduler: {plain:.1f} pods/s; with the extender (gangs): {gang:.1f} pods/s; "
                  f"ratio {gang / plain:.0%} (target >= 80%); violations: "
                  f"{sum(r['violations'] for r in results['gangs'])}")
            spread = {kind: sorted(r["pods_per_second"] for r in results[kind]) for kind in kinds}
            print("the same as medians (the rounds' range), less moved by one noisy round: " + ", ".join(
                f"{kind} {statistics.median(rates):.1f} ({rates[0]:.1f}-{rates[-1]:.1f}) pods/s"
                for kind, rates in spread.items()) +
                f"; ratio {statistics.median(spread['gangs']) / statistics.median(spread['plain']):.0%}")
            if with_null:
                null = statistics.mean(r["pods_per_second"] for r in results["null"])
                calls = "a filter and a bind call each" if args.null_bind else "a filter call each"
                print(f"with the null extender (plain pods, {calls}): {null:.1f} pods/s; "
                      f"ratio {null / plain:.0%}")
        finally:
            if cluster is not None:
                cluster.stop()
            plane.stop()
            if args.logs:
                args.logs.mkdir(parents=True, exist_ok=True)
                for log in Path(folder).rglob("*.log"):
                    shutil.copy(log, args.logs / log.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
