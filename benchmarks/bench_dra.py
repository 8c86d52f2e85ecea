"""GPUs through DRA against the same cluster on device-plugin GPUs, in the same run (issue 38 item 5).

    python benchmarks/bench_dra.py                    # 16,384 nodes x 8 GPUs: device plugin, DRA, DRA with MIG
    python benchmarks/bench_dra.py --nodes 2048       # smaller, quicker
    python benchmarks/bench_dra.py --skip-mig

Each arm is the same cluster (4 zones > blocks of 16 racks > racks of 16 nodes of 8 GPUs, a pod using 4 GPUs
on one node in 8): on the device plugin (`nvidia.com/gpu: 8` in every node's allocatable, the pods ask
`nvidia.com/gpu: 4`); on DRA (no GPU in allocatable; per node one ResourceSlice of 8 GPUs as NVIDIA's
driver publishes them, the DeviceClass `gpu.nvidia.com` serving `nvidia.com/gpu`, and each pod's 4 GPUs in
an allocated ResourceClaim); on DRA with MIG (each node's pool also a counters slice, every GPU with its
two 3g.40gb instances, and the class `mig.nvidia.com`). Figures, each arm's beside the device plugin's:

- startup to ready: feeding every object to a ServiceState as the first list of a watch does, and the
  model built (`load_into`: replace per kind, then synced), CPU seconds;
- memory, in a fresh process per arm (resident set after the build minus before): the state with its
  objects (as a watch decodes them; the state keeps those dicts), and the model alone (minus the objects);
- a slice event: a node's ResourceSlice MODIFIED (a device attribute changed, as a driver republishes it),
  applied and the model current (refresh()); on the device plugin, the node's status MODIFIED (what the
  kubelet sends routinely), applied; median of 40;
- a claim event: a ResourceClaim allocated 2 GPUs on a node (ADDED), applied and the model current; on the
  device plugin, a pod asking 2 GPUs bound on a node (ADDED with a nodeName); median of 40;
- the first filter of a 1,024-pod gang (8 GPUs a pod, zone required, segments of 8 per rack) through the
  whole ASGI app, which plans it: median of 7 gangs.

Targets: DRA within 1.2x of the device plugin on filter and event cost, within 1.5x on memory.
"""
from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import statistics
import sys
import time
import os
import subprocess
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from asgi import post  # noqa: E402
from bench_extender import pending_pods, zone_job  # noqa: E402
from synth import synth_cluster_objects  # noqa: E402

from app.memory import load_into  # noqa: E402
from app.server import create_app  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.state import ServiceState  # noqa: E402
from app.state.service import kind_of  # noqa: E402
from topology.demo import DRA_DRIVER, DRA_GPU_CLASS, DRA_MIG_CLASS, dra_claim, nvidia_slices  # noqa: E402

GPU = "nvidia.com/gpu"
POD_EVERY = 8                   # one node in 8 runs a pod using 4 GPUs
EVENTS = 40


def running_pod(name: str, node: str, gpus: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "serving", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"nodeName": node, "schedulerName": "tas-scheduler", "containers": [{
                "name": "main", "image": "app", "resources": {"requests": {"cpu": "8", GPU: str(gpus)},
                                                              "limits": {GPU: str(gpus)}}}]},
            "status": {"phase": "Running"}}


def cluster(nodes: int, arm: str) -> list[dict]:
    """The arm's objects: 'plugin', 'dra' or 'mig'."""
    objects = synth_cluster_objects(nodes)
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    pods = [running_pod(f"serve-{i}", name, 4) for i, name in enumerate(names[::POD_EVERY])]
    if arm == "plugin":
        return objects + pods
    for obj in objects:
        if obj["kind"] == "Node":
            obj["status"]["allocatable"].pop(GPU)
    slices = [s for name in names for s in nvidia_slices(name, mig=arm == "mig")]
    claims = [dra_claim(f"{p['metadata']['name']}-gpu", "serving", p["spec"]["nodeName"],
                        [f"gpu-{g}" for g in range(4)]) for p in pods]
    classes = [copy.deepcopy(DRA_GPU_CLASS)] + ([copy.deepcopy(DRA_MIG_CLASS)] if arm == "mig" else [])
    return objects + pods + slices + claims + classes


def build(objects: list[dict]) -> tuple[ServiceState, float]:
    state = ServiceState(Settings(log_level="warning"))
    started = time.process_time()
    load_into(state, objects)
    return state, time.process_time() - started


def rss() -> int:
    gc.collect()
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_child(nodes: int, arm: str) -> None:
    """In a fresh process: (state with its objects, the model alone) in bytes, from the resident set: the
    objects decoded as a watch decodes them, then fed (the state keeps those same dicts)."""
    start = rss()
    objects = orjson.loads(orjson.dumps(cluster(nodes, arm)))
    made = rss()
    state = ServiceState(Settings(log_level="warning"))
    load_into(state, objects)
    del objects
    held = rss()
    print(orjson.dumps({"memory": held - start, "model": held - made}).decode())
    del state


def memory(nodes: int, arm: str) -> dict[str, float]:
    """MiB, measured in a child process (tracing allocations would slow the CEL-bound DRA arms tenfold)."""
    out = subprocess.run([sys.executable, __file__, "--memory-child", arm, "--nodes", str(nodes)],
                         capture_output=True, text=True, check=True).stdout
    return {k: v / 2**20 for k, v in orjson.loads(out.strip().splitlines()[-1]).items()}


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3


def slice_events(state: ServiceState, arm: str) -> list[float]:
    times = []
    slices = [o for o in state.objects.list("ResourceSlice", "resource.k8s.io")
              if any(d["name"] == "gpu-0" for d in o["spec"].get("devices") or [])]
    nodes = list(state.objects.list("Node"))
    for i in range(EVENTS):
        if arm == "plugin":
            node = copy.deepcopy(nodes[(i * 97) % len(nodes)])
            node["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": str(i)}]
            kind, obj = kind_of(node), node
        else:
            obj = copy.deepcopy(slices[(i * 97) % len(slices)])
            device = next(d for d in obj["spec"]["devices"] if d["name"] == "gpu-0")
            device["attributes"]["driverVersion"] = {"version": f"580.95.{6 + i}"}
            kind = kind_of(obj)
        started = time.perf_counter()
        state.apply(kind, "MODIFIED", obj)
        state.refresh()
        times.append(time.perf_counter() - started)
    return times


def allocatable_events(state: ServiceState) -> list[float]:
    """The device plugin's own device change: a node's allocatable nvidia.com/gpu changes (a new model)."""
    times = []
    nodes = list(state.objects.list("Node"))
    for i in range(5):
        node = copy.deepcopy(nodes[(i * 97) % len(nodes)])
        node["status"]["allocatable"][GPU] = "7" if i % 2 == 0 else "8"
        started = time.perf_counter()
        state.apply(kind_of(node), "MODIFIED", node)
        state.refresh()
        times.append(time.perf_counter() - started)
    return times


def claim_events(state: ServiceState, arm: str) -> list[float]:
    times = []
    names = state.cluster.node_names
    for i in range(EVENTS):
        node = names[(i * 89 + 1) % len(names)]
        if arm == "plugin":
            obj = running_pod(f"bench-{i}", node, 2)
        else:
            obj = dra_claim(f"bench-{i}", "serving", node, ["gpu-6", "gpu-7"])
            obj["metadata"]["resourceVersion"] = "1"
        kind = kind_of(obj)
        started = time.perf_counter()
        state.apply(kind, "ADDED", obj)
        state.refresh()
        times.append(time.perf_counter() - started)
    return times


async def first_filters(objects: list[dict], nodes: int, gangs: int = 7) -> list[float]:
    jobs = [zone_job(f"big-{i}", gang_size(nodes)) for i in range(gangs)]
    firsts = [pending_pods(job)[0] for job in jobs]
    app = create_app(Settings(log_level="warning"), objects=objects + jobs + firsts, serving=True)
    names = list(app.state.service.cluster.node_names)
    times = []
    for pod in firsts:
        body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
        started = time.perf_counter()
        answer = orjson.loads(await post(app, "/scheduler/filter", body))
        times.append(time.perf_counter() - started)
        if not answer["NodeNames"]:
            raise SystemExit(f"refused: {answer['Error'] or answer.get('FailedAndUnresolvableNodes')}")
    return times


def gang_size(nodes: int) -> int:
    """1,024 pods at 16,384 nodes; a quarter of a zone's nodes on smaller clusters."""
    return min(1024, nodes // 16)


def measure(nodes: int, arm: str) -> dict[str, float]:
    def step(what: str) -> None:
        print(f"    {arm}: {what} ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)

    started = time.perf_counter()
    objects = cluster(nodes, arm)
    state, startup = build(copy.deepcopy(objects))
    figures = {"startup": startup}
    step("built")
    figures["slice"] = median_ms(slice_events(state, arm))
    if arm == "plugin":
        figures["allocatable"] = median_ms(allocatable_events(state))
    figures["claim"] = median_ms(claim_events(state, arm))
    step("events")
    del state
    figures.update(memory(nodes, arm))
    step("memory")
    figures["filter"] = median_ms(asyncio.run(first_filters(objects, nodes)))
    step("filters")
    return figures


ROWS = [("startup", "startup to ready (objects fed, model built), CPU s", "{:.2f}", None),
        ("memory", "memory: state with its objects, MiB", "{:.0f}", None),
        ("model", "memory: the model (objects aside), MiB", "{:.1f}", 1.5),
        ("slice", "slice event (DRA) / node status event (plugin), ms", "{:.3f}", 1.2),
        ("claim", "claim event (DRA) / bound pod event (plugin), ms", "{:.3f}", 1.2),
        ("filter", "first filter of a gang (1,024 pods at 16,384 nodes), ms", "{:.1f}", 1.2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=16_384)
    parser.add_argument("--skip-mig", action="store_true")
    parser.add_argument("--memory-child", metavar="ARM", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.nodes, args.memory_child)
        return
    arms = ["plugin", "dra"] + ([] if args.skip_mig else ["mig"])
    results = {}
    for arm in arms:
        started = time.perf_counter()
        results[arm] = measure(args.nodes, arm)
        print(f"  ({arm}: measured in {time.perf_counter() - started:.0f} s)", flush=True)
    print(f"\n== {args.nodes:,} nodes x 8 GPUs ({DRA_DRIVER}): DRA beside the device plugin, same run")
    print(f"the device plugin's device change (a node's allocatable nvidia.com/gpu, a new model): "
          f"{results['plugin']['allocatable']:.1f} ms median of 5")
    header = f"{'':<56}" + "".join(f"{arm:>12}" for arm in arms) + "".join(f"{a + '/plugin':>14}" for a in arms[1:])
    print(header)
    verdicts = []
    for key, label, fmt, target in ROWS:
        base = results["plugin"][key]
        line = f"{label:<56}" + "".join(f"{fmt.format(results[a][key]):>12}" for a in arms)
        line += "".join(f"{results[a][key] / base:>13.2f}x" for a in arms[1:])
        print(line)
        if target is not None:
            worst = max(results[a][key] / base for a in arms[1:])
            verdicts.append(f"{key} {worst:.2f}x ({'met' if worst <= target else 'NOT met'}, target <= {target}x)")
    print("verdict: " + "; ".join(verdicts))


if __name__ == "__main__":
    main()
