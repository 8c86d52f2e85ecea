"""Extender speed: filter / prioritize / bind latency and pods per second, nodeCacheCapable: true.

    python benchmarks/bench_extender.py            # 5,000 and 20,000 nodes (about a minute)
    python benchmarks/bench_extender.py --quick    # 5,000 nodes only
    python benchmarks/bench_extender.py --first-filter [--profile]   # 1,024-pod gangs, 16,384 nodes
    python benchmarks/bench_extender.py --podgroup     # per-pod filter + bind, KAI PodGroups of 16 and 400 pods
    python benchmarks/bench_extender.py --per-call [--compare TREE]   # CPU per review, filter, bind by stage (verb_cpu.py)

Requests go through the whole ASGI app (routing, body limit, orjson parse, pydantic validation, the
gang logic, orjson answer), called directly in process, so the figures are the service's own time
(kube-scheduler runs elsewhere); pods/s = pods / the service time of their filter + prioritize + bind.
Binds use the in-memory writer (no API round trip). The bare baseline is an endpoint that only reads the same body,
parses it and echoes the node list. Targets: each verb <= 3 ms median at 5,000 nodes; >= 300 pods/s
through filter + prioritize + bind on 2 cores; gang-pod and pass-through filter <= 1.5x the bare endpoint
at 5,000 nodes; the first filter of a 1,024-pod gang on 16,384 nodes <= 25 ms above it.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from asgi import post  # noqa: E402
from synth import synth_cluster_objects  # noqa: E402

from app.server import create_app  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.state import POD_KIND  # noqa: E402
from grouper import expand_pods  # noqa: E402

GPU = "nvidia.com/gpu"
SHAPE = {"zones": 5, "racks_per_block": 10, "nodes_per_rack": 10}     # 500 nodes per block


def gang_job(name: str, pods: int, gpus: int) -> dict:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}", "resourceVersion": "1",
                     "annotations": {"kai.scheduler/topology": "default",
                                     "kai.scheduler/topology-required-placement": "block"}},
        "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                 "template": {"metadata": {"annotations": {"kai.scheduler/segment-size": "8",
                                                           "kai.scheduler/segment-topology-required-placement": "rack"}},
                              "spec": {"containers": [{"name": "main", "image": "trainer",
                                                       "resources": {"limits": {GPU: str(gpus)},
                                                                     "requests": {"cpu": "8", "memory": "64Gi"}}}]}}},
    }


def plain_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}"},
            "spec": {"schedulerName": "tas-scheduler", "containers": [{"name": "main", "image": "app",
                                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Pending"}}


def pending_pods(job: dict) -> list[dict]:
    """The job's pods as the API server holds them (the verbs decide from the service's copy of a pod)."""
    pods = expand_pods(job)
    for pod in pods:
        pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}"
        pod["spec"]["schedulerName"] = "tas-scheduler"
        pod["status"] = {"phase": "Pending"}
    return pods


def bare_app() -> FastAPI:
    """Parse the same body, echo the node list: the floor any extender pays."""
    app = FastAPI()

    @app.post("/scheduler/filter")
    async def echo(request: Request) -> Response:
        args = orjson.loads(await request.body())
        return Response(orjson.dumps({"NodeNames": args.get("NodeNames"), "FailedNodes": {}, "Error": ""}),
                        media_type="application/json")
    return app


class Bench:
    """Calls the ASGI app directly (no client library in the measured time): what the service spends."""

    def __init__(self, app: FastAPI, names: list[str], bare: FastAPI | None = None):
        self.app = app
        self.names = names
        self.bare = bare           # called with the same filter body right before ours: a paired floor
        self.times: dict[str, list[float]] = {"filter": [], "prioritize": [], "bind": [], "bare": []}

    async def call(self, verb: str, body: bytes) -> bytes:
        started = time.perf_counter()
        answer = await post(self.app, f"/scheduler/{verb}", body)
        self.times[verb].append(time.perf_counter() - started)
        return answer

    async def call_bare(self, body: bytes) -> None:
        started = time.perf_counter()
        await post(self.bare, "/scheduler/filter", body)
        self.times["bare"].append(time.perf_counter() - started)

    async def schedule(self, pod: dict) -> str:
        body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": self.names})
        bare_first = len(self.times["bare"]) % 2 == 0     # alternate: neither always finds warm caches
        if self.bare is not None and bare_first:
            await self.call_bare(body)
        answer = orjson.loads(await self.call("filter", body))
        if self.bare is not None and not bare_first:
            await self.call_bare(body)
        if not answer["NodeNames"]:
            raise SystemExit(f"no node for {pod['metadata']['name']}: {answer['Error']} "
                             f"{set(answer['FailedNodes'].values()) | set((answer.get('FailedAndUnresolvableNodes') or {}).values())}")
        passing = answer["NodeNames"]
        body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": passing})
        scores = orjson.loads(await self.call("prioritize", body))
        node = max(scores, key=lambda s: s["Score"])["Host"]
        metadata = pod["metadata"]
        bind = orjson.dumps({"PodName": metadata["name"], "PodNamespace": metadata["namespace"],
                             "PodUID": metadata["uid"], "Node": node})
        error = orjson.loads(await self.call("bind", bind))["Error"]
        if error:
            raise SystemExit(f"bind failed: {error}")
        return node


def ms(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return (f"median {statistics.median(ordered) * 1e3:6.2f} ms  p90 {ordered[int(len(ordered) * 0.9)] * 1e3:6.2f} ms"
            f"  (n={len(values)})")


async def run(node_count: int, gangs: int, gang_pods: int, plain: int) -> None:
    objects = synth_cluster_objects(node_count, **SHAPE)
    jobs = [gang_job(f"train-{i}", gang_pods, 8) for i in range(gangs)]
    pods = [pod for job in jobs for pod in pending_pods(job)]
    started = time.perf_counter()
    app = create_app(Settings(log_level="warning"), objects=objects + jobs + pods, serving=True)
    names = list(app.state.service.cluster.node_names)
    print(f"\n== {node_count:,} nodes (app built in {time.perf_counter() - started:.1f} s)")
    bench = Bench(app, names, bare_app())

    for pod in pods:
        await bench.schedule(pod)
    gang_times = {verb: list(t) for verb, t in bench.times.items()}
    gang_elapsed = sum(sum(t) for verb, t in gang_times.items() if verb != "bare")

    for verb in bench.times:
        bench.times[verb].clear()
    for i in range(plain):
        pod = plain_pod(f"web-{i}")
        app.state.service.apply(POD_KIND, "ADDED", pod)        # the watch brings it before kube-scheduler asks
        await bench.schedule(pod)
    plain_elapsed = sum(sum(t) for verb, t in bench.times.items() if verb != "bare")

    print(f"gang pods ({gangs} gangs x {gang_pods} pods x 8 GPUs, required block, segments of 8 per rack):")
    for verb, values in gang_times.items():
        print(f"  {verb:<10} {ms(values)}")
    print(f"  throughput  {len(pods) / gang_elapsed:7.0f} pods/s through filter + prioritize + bind")
    print("plain pods (pass-through):")
    for verb, values in bench.times.items():
        print(f"  {verb:<10} {ms(values)}")
    print(f"  throughput  {plain / plain_elapsed:7.0f} pods/s through filter + prioritize + bind")
    paired = [(statistics.median(times["filter"]), statistics.median(times["bare"]))
              for times in (gang_times, bench.times)]
    print(f"filter / bare endpoint on the same bodies, called one after the other in alternating order (target <= 1.5x): "
          f"gang pods {paired[0][0] / paired[0][1]:.2f}x, pass-through {paired[1][0] / paired[1][1]:.2f}x")
    registry = app.state.service.metrics.registry
    count = registry.get_sample_value("tas_extender_planning_seconds_count", {"kind": "gang"}) or 0
    total = registry.get_sample_value("tas_extender_planning_seconds_sum", {"kind": "gang"}) or 0.0
    if count:
        print(f"gang planning: {count:.0f} plans, mean {total / count * 1e3:.2f} ms (inside each gang's first filter)")

    bare = Bench(bare_app(), names)
    body = orjson.dumps({"Pod": plain_pod("x"), "Nodes": None, "NodeNames": names})
    for _ in range(200):
        await bare.call("filter", body)
    ours = statistics.median(bench.times["filter"])
    floor = statistics.median(bare.times["filter"])
    print(f"bare endpoint (parse + echo the node list): {ms(bare.times['filter'])}")
    print(f"  overhead of our filter over the bare endpoint: {(ours - floor) * 1e3:+.2f} ms median")


def zone_job(name: str, pods: int, segment: int = 8) -> dict:
    """8-GPU pods in one zone, segments of `segment` per rack: a 1,024-pod gang takes a quarter of a zone."""
    job = gang_job(name, pods, 8)
    job["metadata"]["annotations"]["kai.scheduler/topology-required-placement"] = "zone"
    job["spec"]["template"]["metadata"]["annotations"]["kai.scheduler/segment-size"] = str(segment)
    return job


async def first_filter(node_count: int, pods: int, gangs: int, profile: bool = False, segment: int = 8) -> None:
    """The filter that plans a whole gang (its first pod's), each right after the bare endpoint on the
    same node list. Target: at most 25 ms above the bare endpoint for 1,024 pods on 16,384 nodes."""
    import cProfile
    import pstats

    objects = synth_cluster_objects(node_count)
    jobs = [zone_job(f"big-{i}", pods, segment) for i in range(gangs)]
    firsts = [pending_pods(job)[0] for job in jobs]
    app = create_app(Settings(log_level="warning"), objects=objects + jobs + firsts, serving=True)
    names = list(app.state.service.cluster.node_names)
    print(f"\n== first filter of a {pods:,}-pod gang (zone required, segments of {segment} per rack), "
          f"{node_count:,} nodes, {gangs} gangs")
    ours, bare = Bench(app, names), Bench(bare_app(), names)
    bare_body = orjson.dumps({"Pod": plain_pod("x"), "Nodes": None, "NodeNames": names})
    profiler = cProfile.Profile() if profile else None
    for pod in firsts:
        for _ in range(5):
            await bare.call("filter", bare_body)
        body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
        if profiler:
            profiler.enable()
        answer = orjson.loads(await ours.call("filter", body))
        if profiler:
            profiler.disable()
        if not answer["NodeNames"]:
            raise SystemExit(f"refused: {answer['Error'] or set(answer['FailedNodes'].values())}")
    registry = app.state.service.metrics.registry
    planning = (registry.get_sample_value("tas_extender_planning_seconds_sum", {"kind": "gang"}) or 0.0) / gangs
    first, floor = statistics.median(ours.times["filter"]), statistics.median(bare.times["filter"])
    print(f"bare endpoint (parse + echo):   {ms(bare.times['filter'])}")
    print(f"first filter (plans the gang):  {ms(ours.times['filter'])}")
    print(f"  {(first - floor) * 1e3:+.2f} ms over the bare endpoint (target <= +25 ms); "
          f"of which the planner {planning * 1e3:.2f} ms mean")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(r"(app|topology|grouper)/", 40)


def kai_podgroup_gang(name: str, pods: int) -> list[dict]:
    """A KAI PodGroup of `pods` 1-GPU pods that must share one block, and its pods (named by annotation)."""
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}", "resourceVersion": "1"},
             "spec": {"minMember": pods, "topologyConstraint": {"topology": "default", "requiredTopologyLevel": "block"}}}
    members = [{"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{name}-{i:04d}", "namespace": "bench", "uid": f"uid-{name}-{i}",
                             "resourceVersion": "1", "annotations": {"pod-group-name": name}},
                "spec": {"schedulerName": "tas-scheduler", "containers": [{"name": "main", "image": "trainer",
                         "resources": {"limits": {GPU: "1"}, "requests": {GPU: "1"}}}]},
                "status": {"phase": "Pending"}} for i in range(pods)]
    return [group, *members]


async def podgroup_gangs(node_count: int, sizes: tuple[int, ...]) -> None:
    """Filter and bind of every pod of a KAI PodGroup gang, small and large in the same run: a pod's slot is its
    place among the PodGroup's pods, so a per-pod cost that grows with the gang is O(pods^2) per gang
    (issue 31). Target: the large gang's per-pod filter and bind within 1.5x the small one's."""
    medians = {}
    for size in sizes:
        objects = synth_cluster_objects(node_count, **SHAPE) + kai_podgroup_gang(f"pg-{size}", size)
        app = create_app(Settings(log_level="warning"), objects=objects, serving=True)
        bench = Bench(app, list(app.state.service.cluster.node_names))
        for pod in objects[-size:]:
            await bench.schedule(pod)
        medians[size] = {verb: statistics.median(bench.times[verb]) for verb in ("filter", "bind")}
        print(f"KAI PodGroup of {size:4d} pods, {node_count:,} nodes: filter {ms(bench.times['filter'])}; "
              f"bind {ms(bench.times['bind'])}")
    small, large = medians[sizes[0]], medians[sizes[-1]]
    ratio = max(large[verb] / small[verb] for verb in ("filter", "bind"))
    print(f"  per-pod cost, {sizes[-1]}-pod gang / {sizes[0]}-pod gang: {ratio:.2f}x (target <= 1.5x: "
          f"{'met' if ratio <= 1.5 else 'MISSED'})")


def over_http(node_count: int, gangs: int, gang_pods: int) -> None:
    """The same gang pods end to end: `tas-extender serve --cluster` in its own process, one keep-alive
    HTTP connection from here (the client's own JSON work counts in this figure)."""
    import os
    import socket
    import subprocess
    import tempfile

    import httpx

    jobs = [gang_job(f"train-{i}", gang_pods, 8) for i in range(gangs)]
    pods = [pod for job in jobs for pod in pending_pods(job)]
    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as dump:
        dump.write(orjson.dumps({"apiVersion": "v1", "kind": "List",
                                 "items": synth_cluster_objects(node_count, **SHAPE) + jobs + pods}))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAS_", "KUBERNETES_"))}
    server = subprocess.Popen([sys.executable, "-m", "app.commands.serve",
                               "--cluster", dump.name, "--port", str(port), "--host", "127.0.0.1",
                               "--log-level", "warning"], env=env, cwd=Path(__file__).resolve().parent.parent)
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=30) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start")
                time.sleep(0.2)
            names = client.get("/debug/topology").json()["nodes"]
            names = [f"node-{i:06d}" for i in range(names)]
            headers = {"content-type": "application/json"}
            started = time.perf_counter()
            for pod in pods:
                body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
                passing = orjson.loads(client.post("/scheduler/filter", content=body, headers=headers).content)["NodeNames"]
                body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": passing})
                client.post("/scheduler/prioritize", content=body, headers=headers)
                bind = {"PodName": pod["metadata"]["name"], "PodNamespace": "bench", "PodUID": pod["metadata"]["uid"],
                        "Node": passing[0]}
                error = client.post("/scheduler/bind", json=bind).json()["Error"]
                if error:
                    raise SystemExit(error)
            elapsed = time.perf_counter() - started
        print(f"over HTTP (uvicorn process + this client, {node_count:,} nodes): "
              f"{len(pods) / elapsed:.0f} gang pods/s through filter + prioritize + bind")
    finally:
        server.terminate()
        server.wait(timeout=10)
        os.unlink(dump.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 nodes only")
    parser.add_argument("--first-filter", action="store_true",
                        help="only the first filter of 1,024-pod gangs on 16,384 nodes")
    parser.add_argument("--profile", action="store_true", help="cProfile the first filters (with --first-filter)")
    parser.add_argument("--podgroup", action="store_true",
                        help="only filter + bind per pod of 16- and 400-pod KAI PodGroup gangs on 5,000 nodes")
    parser.add_argument("--per-call", action="store_true",
                        help="the service's CPU per webhook review, filter and bind of a gang pod, by stage, and per "
                             "idle loop (benchmarks/verb_cpu.py; 256 nodes, rounds alternated between trees)")
    parser.add_argument("--compare", metavar="TREE", help="--per-call: another checkout (with its own .venv) beside this one")
    parser.add_argument("--rounds", type=int, default=5, help="--per-call: rounds per tree (default 5)")
    args = parser.parse_args()
    if args.per_call:
        import verb_cpu
        here = str(Path(__file__).resolve().parent.parent)
        verb_cpu.compare([args.compare, here] if args.compare else [here], args.rounds, 24)
        return
    if args.podgroup:
        asyncio.run(podgroup_gangs(5_000, (16, 400)))
        return
    if args.first_filter:
        for segment in (8, 16):              # this benchmark's shape, and issue 31's (segments of 16 per rack)
            asyncio.run(first_filter(16_384, pods=1024, gangs=5, profile=args.profile, segment=segment))
        return
    asyncio.run(run(5_000, gangs=10, gang_pods=32, plain=300))
    over_http(5_000, gangs=5, gang_pods=32)
    if not args.quick:
        asyncio.run(first_filter(16_384, pods=1024, gangs=5))
        asyncio.run(run(20_000, gangs=5, gang_pods=32, plain=150))


if __name__ == "__main__":
    main()
