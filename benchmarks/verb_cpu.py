"""The service's own CPU per webhook review, filter and bind of a gang pod, per stage (issue 39, third pass).

    python benchmarks/bench_extender.py --per-call                         # this tree
    python benchmarks/bench_extender.py --per-call --compare ../verbs-base # another tree beside it, alternated

Each round runs in a fresh process on one tree's `app` (the measuring code is this file, the same for both):
256 nodes laid out as bench_e2e's (2 zones x 4 blocks x 4 racks x 8 nodes of 8 GPUs), `--jobs` Indexed Jobs of
16 pods of 1 GPU as bench_e2e makes them (half required rack, half required block with segments of 4 per
rack). Per Job, as on the real loop: the AdmissionReview of each pod as the API server sends it (the pod as
the Job controller creates it, defaulted, with the built-in admission plugins' tolerations, service-account
volume and managedFields), the admitted pod (the webhook's patch applied) brought by the watch, then for
each pod the filter (ExtenderArgs: that pod as kube-scheduler holds it, and the 256 NodeNames) and the bind
(ExtenderBindingArgs), and the bound pod's watch event. The Binding goes through the service's KubeWriter
and urllib3 to a local HTTP server in another process (answering 201 with the Binding), so the thread
hand-off and urllib3's work count as they do on the real loop.

CPU is `time.process_time()` of the whole process (every thread) around each whole ASGI call, and around
the stages inside it (the functions wrapped by name: parse_review, admit, parse_args, GangScheduler.filter,
parse, GangScheduler.bind, KubeWriter.bind). Printed: µs per call, medians over rounds, trees side by side.
"""
from __future__ import annotations

import asyncio
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

JOB_PODS, SEGMENT = 16, 4
GPU = "nvidia.com/gpu"


def _job(name: str, shape: str) -> dict:
    annotations = {"kai.scheduler/topology": "default",
                   "kai.scheduler/topology-required-placement": "rack" if shape == "rack" else "block"}
    template_annotations = ({"kai.scheduler/segment-size": str(SEGMENT),
                             "kai.scheduler/segment-topology-required-placement": "rack"} if shape == "segments" else {})
    uid = f"0b5e4c1a-{abs(hash(name)) % 10**4:04d}-4f6e-9d7a-{abs(hash(name + 'x')) % 10**12:012d}"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "bench", "uid": uid, "resourceVersion": "1000",
                         "annotations": annotations, "labels": {"bench": "jobs"}},
            "spec": {"completionMode": "Indexed", "completions": JOB_PODS, "parallelism": JOB_PODS, "backoffLimit": 0,
                     "template": {"metadata": {"labels": {"bench": "jobs", "shape": shape},
                                               "annotations": template_annotations},
                                  "spec": {"schedulerName": "tas-scheduler", "restartPolicy": "Never",
                                           "containers": [{"name": "main", "image": "busybox:1.36",
                                                           "resources": {"limits": {GPU: "1"}}}]}}}}


def _created_pod(job: dict, index: int) -> dict:
    """The pod as the API server hands it to the webhook: the Job controller's pod, defaulted, after the built-in
    admission plugins (service-account volume, default and extended-resource tolerations), with managedFields."""
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    template = job["spec"]["template"]
    labels = {**template["metadata"]["labels"], "batch.kubernetes.io/controller-uid": uid,
              "batch.kubernetes.io/job-name": name, "controller-uid": uid, "job-name": name,
              "batch.kubernetes.io/job-completion-index": str(index)}
    annotations = {**template["metadata"]["annotations"], "batch.kubernetes.io/job-completion-index": str(index)}
    container = {"name": "main", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
                 "env": [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                     "apiVersion": "v1", "fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}}],
                 "resources": {"limits": {GPU: "1"}, "requests": {GPU: "1"}},
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                 "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": True,
                                   "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}
    managed = [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                "time": "2026-12-02T05:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {
                    "f:metadata": {"f:annotations": {f"f:{k}": {} for k in annotations},
                                   "f:generateName": {}, "f:labels": {f"f:{k}": {} for k in labels},
                                   "f:ownerReferences": {f'k:{{"uid":"{uid}"}}': {}}},
                    "f:spec": {"f:containers": {'k:{"name":"main"}': {
                        ".": {}, "f:env": {".": {}, 'k:{"name":"JOB_COMPLETION_INDEX"}': {".": {}, "f:name": {},
                                                                                       "f:valueFrom": {}}},
                        "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:resources": {"f:limits": {}},
                        "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
                        "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:hostname": {}, "f:restartPolicy": {},
                        "f:schedulerName": {}, "f:securityContext": {}, "f:subdomain": {},
                        "f:terminationGracePeriodSeconds": {}}}}]
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"generateName": f"{name}-{index}-", "namespace": "bench", "labels": labels,
                         "annotations": annotations, "managedFields": managed,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"volumes": [{"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                            "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
                     "containers": [container], "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
                     "dnsPolicy": "ClusterFirst", "serviceAccountName": "default", "serviceAccount": "default",
                     "hostname": f"{name}-{index}", "subdomain": name, "securityContext": {},
                     "schedulerName": "tas-scheduler",
                     "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                      "effect": "NoExecute", "tolerationSeconds": 300},
                                     {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                      "effect": "NoExecute", "tolerationSeconds": 300},
                                     {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                     "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority"},
            "status": {}}


def _review(pod: dict, uid: str) -> bytes:
    import orjson
    return orjson.dumps({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                    "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                    "namespace": "bench", "operation": "CREATE",
                    "userInfo": {"username": "system:serviceaccount:kube-system:job-controller",
                                 "uid": "5d7c1e0e-1111-2222-3333-444455556666",
                                 "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
                                            "system:authenticated"]},
                    "object": pod, "oldObject": None, "dryRun": False,
                    "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1",
                                "fieldManager": "kube-controller-manager"}}})


def _stored(pod: dict, name: str, number: int) -> dict:
    """The admitted pod as the watch brings it: named, uid, timestamps, status Pending."""
    metadata = {**pod["metadata"], "name": name, "uid": f"7f3a9c2e-0000-4000-8000-{number:012d}",
                "resourceVersion": str(5000 + number), "creationTimestamp": "2026-12-02T05:00:01Z"}
    return {**pod, "metadata": metadata,
            "status": {"phase": "Pending", "qosClass": "BestEffort"}}


BINDING_SERVER = r"""
import asyncio, sys
ANSWER = b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201}'
HEAD = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(ANSWER)
async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            writer.write(HEAD + ANSWER)
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    async with server:
        await server.serve_forever()
asyncio.run(main())
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Stages:
    """process_time() accumulated per named stage (wrapped functions) and per whole call."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.active = False

    def add(self, name: str, seconds: float) -> None:
        if self.active:
            self.cpu[name] = self.cpu.get(name, 0.0) + seconds
            self.calls[name] = self.calls.get(name, 0) + 1

    def wrap(self, owner, attribute: str, name: str) -> None:
        original = getattr(owner, attribute)
        stages = self
        if asyncio.iscoroutinefunction(original):
            async def wrapped(*args, **kwargs):
                started = time.process_time()
                try:
                    return await original(*args, **kwargs)
                finally:
                    stages.add(name, time.process_time() - started)
        else:
            def wrapped(*args, **kwargs):
                started = time.process_time()
                try:
                    return original(*args, **kwargs)
                finally:
                    stages.add(name, time.process_time() - started)
        setattr(owner, attribute, wrapped)


async def _one_round(jobs: int, port: int) -> dict:
    import jsonpatch
    import orjson
    from asgi import post
    from synth import synth_cluster_objects

    import app.http.extender.routes as routes
    import app.http.webhook as webhook_http
    from app.kube.client import KubeApi, build_api_client
    from app.kube.writer import KubeWriter
    from app.scheduling import GangScheduler
    from app.server import create_app
    from app.settings import Settings
    from app.state import POD_KIND

    from app.scheduling.binding import Binder
    from app.scheduling.unfit_gate import UnfitGangs
    from app.state.service import ServiceState
    import app.http.extender.models as models
    import app.webhook.admit as admit
    stages = Stages()
    for owner, attribute, label in (
            (webhook_http, "parse_review", "webhook: parse_review"), (webhook_http, "decide", "webhook: admit"),
            (routes, "parse_args", "filter: parse_args"), (GangScheduler, "filter", "filter: GangScheduler.filter"),
            (routes, "parse", "bind: parse"), (GangScheduler, "bind", "bind: GangScheduler.bind"),
            (KubeWriter, "bind", "bind: KubeWriter.bind (urllib3)"),
            (admit, "pod_shape_problem", "webhook: .. pod_shape_problem"),
            (UnfitGangs, "should_gate", "webhook: .. UnfitGangs.should_gate"),
            (models, "pod_shape_problem", "filter: .. pod_shape_problem"),
            (Binder, "placement", "bind: .. Binder.placement"),
            (ServiceState, "record_binding", "bind: .. ServiceState.record_binding")):
        stages.wrap(owner, attribute, label)

    api = KubeApi(build_api_client(host=f"http://127.0.0.1:{port}"))
    objects = synth_cluster_objects(256, zones=2, racks_per_block=4, nodes_per_rack=8)
    job_objects = [_job(f"job-{j:02d}", "rack" if j % 2 == 0 else "segments") for j in range(jobs)]
    app = create_app(Settings(log_level="info"), objects=objects + job_objects, serving=True,
                     writer=lambda _state: KubeWriter(api))
    service = app.state.service
    service.synced_once = True
    names = list(service.cluster.node_names)
    cpu: dict[str, list[float]] = {"webhook review (whole call)": [], "filter (whole call)": [],
                                   "bind (whole call)": [], "watch: pod ADDED + bound MODIFIED": []}

    async def timed(name: str, path: str, body: bytes, scheme: str = "http") -> bytes:
        started = time.process_time()
        answer = await post(app, path, body, scheme=scheme)
        cpu[name].append(time.process_time() - started)
        return answer

    gc.collect()
    number = 0
    for j, job in enumerate(job_objects):
        stages.active = cpu_active = j >= 2            # the first two Jobs warm up
        admitted = []
        for index in range(JOB_PODS):
            pod = _created_pod(job, index)
            answer = orjson.loads(await timed("webhook review (whole call)", "/mutate",
                                              _review(pod, f"uid-{number}"), scheme="https"))
            response = answer["response"]
            if not response["allowed"]:
                raise SystemExit(f"denied: {response}")
            import base64
            if response.get("patch"):
                pod = jsonpatch.apply_patch(pod, orjson.loads(base64.b64decode(response["patch"])))
            number += 1
            stored = _stored(pod, f"{job['metadata']['name']}-{index}-{number:05d}", number)
            started = time.process_time()
            service.apply(POD_KIND, "ADDED", stored)
            cpu["watch: pod ADDED + bound MODIFIED"].append(time.process_time() - started)
            admitted.append(stored)
        for stored in admitted:
            body = orjson.dumps({"Pod": stored, "Nodes": None, "NodeNames": names})
            answer = orjson.loads(await timed("filter (whole call)", "/scheduler/filter", body))
            if not answer["NodeNames"] or answer["Error"]:
                raise SystemExit(f"filter refused {stored['metadata']['name']}: {answer}")
            node = answer["NodeNames"][0]
            metadata = stored["metadata"]
            bind = orjson.dumps({"PodName": metadata["name"], "PodNamespace": "bench", "PodUID": metadata["uid"],
                                 "Node": node})
            error = orjson.loads(await timed("bind (whole call)", "/scheduler/bind", bind))["Error"]
            if error:
                raise SystemExit(f"bind failed: {error}")
            bound = {**stored, "metadata": {**metadata, "resourceVersion": str(int(metadata["resourceVersion"]) + 10**6)},
                     "spec": {**stored["spec"], "nodeName": node}}
            started = time.process_time()
            service.apply(POD_KIND, "MODIFIED", bound)
            cpu["watch: pod ADDED + bound MODIFIED"][-1] += time.process_time() - started
        if not cpu_active:
            for values in cpu.values():
                values.clear()
    out = {name: statistics.mean(values) * 1e6 for name, values in cpu.items()}
    stages.active = False
    engine = app.state.engine
    periodic = {"idle: state.expire": service.expire, "idle: engine.wake_refused": engine.wake_refused,
                "idle: unfit.release_due": engine.unfit.release_due, "idle: stale.evict_due": engine.stale.evict_due,
                "idle: asyncio.to_thread hop": lambda: None}
    for name, call in periodic.items():           # the service's background loops, nothing to schedule
        await asyncio.to_thread(call)
        started = time.process_time()
        for _ in range(200):
            await asyncio.to_thread(call) if name.endswith("hop") else call()
        out[name] = (time.process_time() - started) / 200 * 1e6
    out.update({name: stages.cpu[name] / stages.calls[name] * 1e6 for name in stages.cpu})
    out.update(_focused(app, api, job_objects[-1], names))
    out["_calls"] = {name: len(values) for name, values in cpu.items()}
    out["_stage_calls"] = dict(stages.calls)
    return out


def _focused(app, api, job: dict, names: list[str]) -> dict:
    """The changed pieces alone, hot, best of 5 repeats: less noise than the calls above on a shared machine."""
    import timeit

    import orjson

    from app.kube.writer import KubeWriter
    from app.state.objects import pod_shape_problem
    created = _created_pod(job, 3)
    stored = _stored(created, "focused-0", 10**6)
    metrics = app.state.service.metrics
    writer = KubeWriter(api)
    body = orjson.dumps({"Pod": stored, "Nodes": None, "NodeNames": names})
    from app.http.extender.models import ExtenderArgs
    cases = {
        "focused: pod_shape_problem (the admitted pod)": (lambda: pod_shape_problem(stored, "Pod"), 2000),
        "focused: pod_shape_problem (the pod at admission)": (lambda: pod_shape_problem(created, "request.object"), 2000),
        "focused: ExtenderArgs from orjson + model_validate": (
            lambda: ExtenderArgs.model_validate({k: v for k, v in orjson.loads(body).items() if k != "NodeNames"}), 1000),
        "focused: ExtenderArgs.model_validate_json (for comparison)": (lambda: ExtenderArgs.model_validate_json(body), 1000),
        "focused: latency.labels(verb).observe": (lambda: metrics.latency.labels("filter").observe(0.001), 5000),
        "focused: KubeWriter.bind, local HTTP server": (
            lambda: writer.bind("bench", "focused-0", "uid", "node-000001", {"tas-extender.io/gang": "bench/g"}), 300),
    }
    out = {}
    for name, (call, number) in cases.items():
        call()
        out[name] = min(timeit.repeat(call, number=number, repeat=5, timer=time.process_time)) / number * 1e6
    return out


def child(tree: str, jobs: int) -> None:
    """One round on `tree`'s app; prints one JSON line."""
    import logging
    sys.path.insert(0, str(HERE))
    import asgi  # noqa: F401
    import synth  # noqa: F401 - it puts this checkout's root first on sys.path: `tree` goes before it
    sys.path.insert(0, tree)
    import app
    if Path(app.__file__).resolve().parent.parent != Path(tree).resolve():
        raise SystemExit(f"app imported from {app.__file__}, not from {tree}")
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-c", BINDING_SERVER, str(port)])
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        logging.getLogger().handlers.clear()
        result = asyncio.run(_one_round(jobs, port))
    finally:
        server.terminate()
        server.wait(timeout=10)
    import app
    result["_tree"] = str(Path(app.__file__).resolve().parent.parent)
    print("RESULT " + json.dumps(result), flush=True)


def compare(trees: list[str], rounds: int, jobs: int) -> None:
    """Rounds alternated between trees (ABBA...), each a fresh process; medians side by side."""
    results: dict[str, list[dict]] = {tree: [] for tree in trees}
    order = []
    for r in range(rounds):
        order += trees if r % 2 == 0 else list(reversed(trees))
    for tree in order:
        python = Path(tree) / ".venv" / "bin" / "python"
        python = str(python) if python.exists() else sys.executable
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TAS_", "KUBERNETES_"))}
        env["PYTHONHASHSEED"] = "0"
        run = subprocess.run([python, str(HERE / "verb_cpu.py"), "--child", tree, "--jobs", str(jobs)],
                             capture_output=True, text=True, env=env, cwd=tree)
        lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
        if run.returncode or not lines:
            raise SystemExit(f"round on {tree} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
        results[tree].append(json.loads(lines[-1][7:]))
        print(f"  round on {tree}: done (load {os.getloadavg()[0]:.1f})", flush=True)
    first = results[trees[0]][0]
    names = [n for n in first if not n.startswith("_")]
    order_of = ["webhook review (whole call)", "webhook: parse_review", "webhook: admit",
                "webhook: .. pod_shape_problem", "webhook: .. UnfitGangs.should_gate",
                "filter (whole call)", "filter: parse_args", "filter: .. pod_shape_problem",
                "filter: GangScheduler.filter",
                "bind (whole call)", "bind: parse", "bind: GangScheduler.bind", "bind: KubeWriter.bind (urllib3)",
                "bind: .. Binder.placement", "bind: .. ServiceState.record_binding",
                "watch: pod ADDED + bound MODIFIED"]
    names = [n for n in order_of if n in names] + [n for n in names if n not in order_of]
    header = " | ".join(f"{Path(t).name} µs" for t in trees)
    print(f"\nservice CPU per call, µs, median of {rounds} rounds [range] ({jobs - 2} Jobs x {JOB_PODS} pods a round "
          f"after 2 warm-up Jobs; 256 nodes)")
    print(f"| stage | {header} |" + (" ratio |" if len(trees) == 2 else ""))
    print("|---|" + "---|" * (len(trees) + (len(trees) == 2)))
    for name in names:
        cells, medians = [], []
        for tree in trees:
            values = [r.get(name) for r in results[tree] if r.get(name) is not None]
            if not values:
                cells.append("-")
                medians.append(None)
                continue
            medians.append(statistics.median(values))
            digits = 1 if medians[-1] < 20 else 0
            cells.append(f"{medians[-1]:.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]")
        ratio = (f" {medians[1] / medians[0]:.2f}x |" if len(trees) == 2 and all(medians) else
                 (" - |" if len(trees) == 2 else ""))
        print(f"| {name} | " + " | ".join(cells) + " |" + ratio)
    whole = ["webhook review (whole call)", "filter (whole call)", "bind (whole call)"]
    for tree in trees:
        per_pod = [r[whole[0]] + 1.05 * r[whole[1]] + r[whole[2]] for r in results[tree]]
        print(f"{Path(tree).name}: per gang pod (1 review + 1.05 filter + 1 bind, in-process, no TLS/HTTP): "
              f"{statistics.median(per_pod) / 1e3:.3f} ms")


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--child")
    parser.add_argument("--jobs", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trees", default=str(HERE.parent))
    args = parser.parse_args()
    if args.child:
        child(args.child, args.jobs)
    else:
        compare(args.trees.split(","), args.rounds, args.jobs)
