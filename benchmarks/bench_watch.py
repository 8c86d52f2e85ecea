"""What one pod watch event costs the service: reading it off the stream, decoding it, applying it.

    python benchmarks/bench_watch.py                                   # this tree, 256 and 1,024 nodes
    python benchmarks/bench_watch.py --before /path/to/base/checkout   # and a base tree, side by side

Each tree is measured in its own process (its `app`, `grouper` and `topology` first on sys.path), the trees
alternated round by round; CPU is the measuring thread's (`time.thread_time`), per event, median of the
rounds. The workload is issue 39's round: 24 Indexed Jobs x 16 pods of 1 GPU (12 required in one rack, 12 in
one block with segments of 4 per rack) on a synthetic cluster, plus as many plain pods bound by another
scheduler. The pods are what the API server sends: each Job pod as the Job controller makes it, defaulted and
admitted (the service's own webhook patch applied), with server fields and managedFields; the bind's event
carries nodeName, the Binding's annotations, the PodScheduled condition and one more managedFields entry.

Stages, each its own timing:
- **read**: the lines of a real chunked HTTP/1.1 watch response over TLS from a local server (one chunk per
  event, flushed per event, as the API server writes them), through the client's `iter_resp_lines` as
  `KubeApi.stream` reads them, without decoding; and through `block_lines` below (a lever tried, not kept);
- **decode**: `orjson.loads` of each line as the reader hands it;
- **apply**: `KubeSource._on_event` (managedFields dropped, `ServiceState.apply`) while the gangs are in
  flight: every gang's ADDED events, then per pod the service's own filter and bind verbs (not timed) and
  the bind's MODIFIED event (timed), 8 gangs interleaved.
- **stream**: read + decode through `KubeApi.stream` as the sync thread calls it (the sum, measured once).
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import importlib.util
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GPU = "nvidia.com/gpu"
SCHEDULER = "tas-scheduler"


def _tree_imports(tree: Path) -> None:
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(tree))


# ---------------------------------------------------------------------------------------------- pods
def jobs(count: int = 24, pods: int = 16) -> list[dict]:
    made = []
    for j in range(count):
        segments = j % 2 == 1
        annotations = {"kai.scheduler/topology": "default",
                       "kai.scheduler/topology-required-placement": "block" if segments else "rack"}
        template_annotations = {"kai.scheduler/segment-size": "4",
                                "kai.scheduler/segment-topology-required-placement": "rack"} if segments else {}
        made.append({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"gang-{j:02d}", "namespace": "bench", "uid": f"0b5c{j:04d}-1e2d-4c4b-9a0b-c1d2e3f40004",
                         "resourceVersion": "100", "annotations": annotations},
            "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                     "template": {"metadata": {"annotations": template_annotations},
                                  "spec": {"schedulerName": SCHEDULER, "restartPolicy": "Never",
                                           "containers": [{"name": "main", "image": "registry.local/trainer:1",
                                                           "command": ["sleep", "3600"],
                                                           "resources": {"limits": {GPU: "1"}}}]}}}})
    return made


def _managed(manager: str, operation: str, fields: dict, subresource: str | None = None) -> dict:
    entry = {"manager": manager, "operation": operation, "apiVersion": "v1", "time": "2026-12-02T05:40:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": fields}
    if subresource:
        entry["subresource"] = subresource
    return entry


CONTROLLER_FIELDS = {"f:metadata": {"f:annotations": {".": {}, "f:batch.kubernetes.io/job-completion-index": {}},
                                    "f:generateName": {}, "f:labels": {
    ".": {}, "f:batch.kubernetes.io/controller-uid": {}, "f:batch.kubernetes.io/job-completion-index": {},
    "f:batch.kubernetes.io/job-name": {}, "f:controller-uid": {}, "f:job-name": {}},
    "f:ownerReferences": {".": {}, "k:{\"uid\":\"0b5c0000-1e2d-4c4b-9a0b-c1d2e3f40004\"}": {}}},
    "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {
        ".": {}, "f:command": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:resources": {
            ".": {}, "f:limits": {".": {}, "f:nvidia.com/gpu": {}}}, "f:terminationMessagePath": {},
        "f:terminationMessagePolicy": {}}},
        "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:hostname": {}, "f:restartPolicy": {},
        "f:schedulerName": {}, "f:securityContext": {}, "f:subdomain": {}, "f:terminationGracePeriodSeconds": {}}}
SCHEDULED_FIELDS = {"f:status": {"f:conditions": {".": {}, "k:{\"type\":\"PodScheduled\"}": {
    ".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}}}}


def admitted_pods(app, job: dict | None, index_base: int, plain: int = 0) -> list[dict]:
    """The pods as the API server stores them after admission (the service's webhook patch applied)."""
    import jsonpatch
    import orjson
    from asgi import post
    from grouper import expand_pods
    spec = importlib.util.spec_from_file_location("admission_generate", ROOT / "tests/fixtures/admission/generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    if job is not None:
        made = expand_pods(job)
    else:
        made = [{"apiVersion": "v1", "kind": "Pod", "metadata": {
            "generateName": f"plain-{i // 16:02d}-", "namespace": "bench",
            "labels": {"batch.kubernetes.io/job-name": f"plain-{i // 16:02d}", "job-name": f"plain-{i // 16:02d}",
                       "batch.kubernetes.io/job-completion-index": str(i % 16)},
            "annotations": {"batch.kubernetes.io/job-completion-index": str(i % 16)},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"plain-{i // 16:02d}",
                                 "uid": f"9a9a{i // 16:04d}-1e2d-4c4b-9a0b-c1d2e3f40004", "controller": True,
                                 "blockOwnerDeletion": True}]},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.local/trainer:1",
                                                              "command": ["sleep", "3600"],
                                                              "resources": {"limits": {GPU: "1"}}}]}}
            for i in range(plain)]
    out = []
    for n, pod in enumerate(made):
        metadata = pod["metadata"]
        name = metadata.pop("name", None) or metadata["generateName"].rstrip("-")
        metadata["generateName"] = f"{name}-"
        metadata.setdefault("namespace", "bench")
        pod = generate.defaulted(pod)
        pod["spec"]["schedulerName"] = SCHEDULER if job is not None else "default-scheduler"
        body = generate.review(pod, "Job", namespace="bench", seed=f"{name}-{n}")
        answer = orjson.loads(asyncio.run(post(app, "/mutate", orjson.dumps(body), scheme="https")))
        patch = answer["response"].get("patch")
        if patch:
            pod = jsonpatch.apply_patch(pod, orjson.loads(base64.b64decode(patch)))
        metadata = pod["metadata"]
        suffix = f"{index_base + n:05x}"
        metadata.update({"name": f"{name}-{suffix}", "uid": f"7f3e{index_base + n:04x}-9c1b-4c4b-9a0b-c1d2e3f4{n:04x}",
                         "resourceVersion": str(1000 + index_base + n), "creationTimestamp": "2026-12-02T05:40:00Z",
                         "managedFields": [_managed("kube-controller-manager", "Update", CONTROLLER_FIELDS)]})
        pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        out.append(pod)
    return out


def bound_version(pod: dict, node: str, annotations: dict, version: int) -> dict:
    """The pod's MODIFIED event at bind: the Binding's node and annotations, kube-scheduler's condition."""
    pod = copy.deepcopy(pod)
    metadata = pod["metadata"]
    metadata["resourceVersion"] = str(version)
    if annotations:
        metadata["annotations"] = {**metadata.get("annotations", {}), **annotations}
    metadata["managedFields"].append(_managed("kube-scheduler", "Update", SCHEDULED_FIELDS, "status"))
    pod["spec"]["nodeName"] = node
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                                    "lastTransitionTime": "2026-12-02T05:40:01Z"}]
    return pod


# ---------------------------------------------------------------------------------------------- measure
class RecordingWriter:
    """A live writer's shape: a bind is sent (here: recorded), the watch brings the pod later."""
    blocking = False

    def __init__(self, state):
        self.state, self.binds = state, {}

    def bind(self, namespace, name, uid, node, annotations=None):
        self.binds[f"{namespace}/{name}"] = (node, dict(annotations or {}))

    def __getattr__(self, name):            # events, annotations, evictions: nothing to record
        return lambda *args, **kwargs: None


def measure(tree: Path, nodes: int, in_flight: int = 8) -> dict:
    _tree_imports(tree)
    import orjson
    import app as app_package
    from app.kube.sync import KubeSource
    from app.ports import WATCHED_KINDS
    from app.server import create_app
    from app.settings import Settings
    from synth import synth_cluster_objects
    assert Path(app_package.__file__).resolve().is_relative_to(tree.resolve()), app_package.__file__
    pod_kind = next(k for k in WATCHED_KINDS if k.kind == "Pod" and not k.group)

    shape = dict(zones=1, racks_per_block=16, nodes_per_rack=16) if nodes == 256 else {}
    made_jobs = jobs()
    app = create_app(Settings(), objects=synth_cluster_objects(nodes, **shape) + made_jobs, writer=RecordingWriter)
    engine, state = app.state.engine, app.state.service
    writer = engine.writer
    source = KubeSource(api=None, sink=state, kinds=[pod_kind])
    gangs = [admitted_pods(app, job, 16 * j) for j, job in enumerate(made_jobs)]
    plain = admitted_pods(app, None, 100_000, plain=24 * 16)
    names = list(state.cluster.node_names)

    def free_node() -> str:
        """A node with a GPU free and no slot held: where kube-scheduler puts a plain pod."""
        cluster = state.cluster
        column = cluster.resources.column[GPU]
        for i, name in enumerate(cluster.node_names):
            if cluster.free[i][column] > 0 and not list(state.plans.on_node(name)):
                return name
        raise AssertionError("no free node")
    version = 10_000
    lines: list[bytes] = []
    timed = {"ADDED gang": [], "MODIFIED gang (bind)": [], "ADDED plain": [], "MODIFIED plain (bind)": []}

    def deliver(what: str, type_: str, pod: dict) -> None:
        line = orjson.dumps({"type": type_, "object": pod})
        lines.append(line)
        event = orjson.loads(line)
        started = time.thread_time()
        source._on_event(pod_kind, event)
        timed[what].append(time.thread_time() - started)

    import gc
    gc.collect()
    gc.freeze()
    for start in range(0, len(gangs), in_flight):
        wave = gangs[start:start + in_flight]
        for gang in wave:
            for pod in gang:
                deliver("ADDED gang", "ADDED", pod)
        for i in range(16):                        # the wave's pods scheduled interleaved, as kube-scheduler does
            for gang in wave:
                pod = gang[i]
                watched = state.find_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
                outcome = engine.filter(watched, names)
                assert outcome.nodes, (pod["metadata"]["name"], outcome.error, set(outcome.failed.values()))
                node = outcome.nodes[0]
                assert engine.bind("bench", pod["metadata"]["name"], pod["metadata"]["uid"], node) == "", node
                version += 1
                bound, annotations = writer.binds[f"bench/{pod['metadata']['name']}"]
                deliver("MODIFIED gang (bind)", "MODIFIED", bound_version(pod, bound, annotations, version))
        for pod in plain[start * 16:(start + len(wave)) * 16]:
            deliver("ADDED plain", "ADDED", pod)
        for pod in plain[start * 16:(start + len(wave)) * 16]:
            version += 1
            deliver("MODIFIED plain (bind)", "MODIFIED", bound_version(pod, free_node(), {}, version))
    assert len(state.cluster.pods) == 2 * 24 * 16, len(state.cluster.pods)
    result = {"nodes": nodes, "events": len(lines), "bytes_per_event": sum(map(len, lines)) / len(lines),
              "apply": {what: statistics.median(values) * 1e6 for what, values in timed.items()},
              "apply_mean": {what: statistics.fmean(values) * 1e6 for what, values in timed.items()}}
    result.update(read_and_decode(lines))
    return result


# ---------------------------------------------------------------------------------------------- the stream
def _certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "tls.crt", folder / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


class ChunkedServer:
    """Answers every GET with the recorded lines as a chunked watch response over TLS: one chunk per event,
    each sent on its own (the API server flushes after every event), then the last chunk."""

    def __init__(self, lines: list[bytes], cert: Path, key: Path):
        self.lines = lines
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            raw, _ = self.listener.accept()
            threading.Thread(target=self._answer, args=(raw,), daemon=True).start()

    def _answer(self, raw: socket.socket) -> None:
        with self.context.wrap_socket(raw, server_side=True) as conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            for line in self.lines:
                data = line + b"\n"
                conn.sendall(b"%x\r\n%s\r\n" % (len(data), data))
            conn.sendall(b"0\r\n\r\n")


def block_lines(response) -> "Iterator[bytes]":
    """The lever tried (not kept): the chunked body read from the connection in blocks of whatever has
    arrived, its chunks taken apart here and the lines split with bytes.split, instead of urllib3's
    `read_chunked` (a readline and a read per chunk) under the client's `iter_resp_lines`."""
    raw = response._fp.fp
    pending, tail, at = b"", b"", 0
    while True:
        block = raw.read1(65536)
        if not block:
            raise OSError("Response ended prematurely")
        pending = pending[at:] + block if at < len(pending) else block
        at, payload = 0, []
        while True:
            eol = pending.find(b"\r\n", at)
            if eol < 0:
                break
            size = int(pending[at:eol].split(b";", 1)[0], 16)
            if size == 0:
                yield from [line for line in (tail + b"".join(payload)).split(b"\n")[:-1] if line]
                return
            end = eol + 2 + size
            if end + 2 > len(pending):
                break
            payload.append(pending[eol + 2:end])
            at = end + 2
        if payload:
            parts = (tail + b"".join(payload)).split(b"\n")
            tail = parts.pop()
            yield from [part for part in parts if part]


def read_and_decode(lines: list[bytes], repeats: int = 5) -> dict:
    import orjson
    import urllib3
    from app.kube import client as kube_client
    from app.kube.client import KubeApi
    from kubernetes.client import ApiClient, Configuration
    with tempfile.TemporaryDirectory() as folder:
        cert, key = _certificate(Path(folder))
        server = ChunkedServer(lines, cert, key)
        configuration = Configuration()
        configuration.host = f"https://127.0.0.1:{server.port}"
        configuration.ssl_ca_cert = str(cert)
        api = KubeApi(ApiClient(configuration))
        reader = getattr(kube_client, "watch_lines", None) or kube_client.iter_resp_lines
        read, stream, decode, blocks = [], [], [], []
        for _ in range(repeats):
            response = api._send("GET", "/api/v1/pods", [("watch", "1")], None, None, (10.0, 30.0))
            started = time.thread_time()
            assert sum(1 for _ in block_lines(response)) == len(lines)
            blocks.append((time.thread_time() - started) / len(lines))
            response.close()
            response = api._send("GET", "/api/v1/pods", [("watch", "1")], None, None, (10.0, 30.0))
            started, got = time.thread_time(), []
            for line in reader(response):
                got.append(line)
            read.append((time.thread_time() - started) / len(lines))
            response.close()
            assert len([g for g in got if g]) == len(lines), (len(got), len(lines))
            started = time.thread_time()
            for line in got:
                orjson.loads(line)
            decode.append((time.thread_time() - started) / len(lines))
            started, count = time.thread_time(), 0
            for _event in api.stream("/api/v1/pods", [("watch", "1")], read_timeout=30.0):
                count += 1
            stream.append((time.thread_time() - started) / len(lines))
            assert count == len(lines)
        api.close()
        del urllib3
    return {"read": statistics.median(read) * 1e6, "read in blocks": statistics.median(blocks) * 1e6,
            "decode": statistics.median(decode) * 1e6,
            "stream": statistics.median(stream) * 1e6}


# ---------------------------------------------------------------------------------------------- driver
def run_tree(tree: Path, nodes: int) -> dict:
    answer = subprocess.run([sys.executable, __file__, "--measure", str(tree), "--nodes", str(nodes)],
                            capture_output=True, text=True, check=False)
    if answer.returncode:
        raise SystemExit(f"{tree} at {nodes} nodes failed:\n{answer.stderr[-3000:]}")
    return json.loads(answer.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="a checkout of the base tree, measured side by side")
    parser.add_argument("--nodes", default="256,1024")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, int(args.nodes))))
        return
    trees = ([("before", args.before)] if args.before else []) + [("after", ROOT)]
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    for nodes in [int(n) for n in args.nodes.split(",")]:
        results: dict[str, list[dict]] = {label: [] for label, _ in trees}
        for round_ in range(args.rounds):
            order = trees if round_ % 2 == 0 else trees[::-1]
            for label, tree in order:
                results[label].append(run_tree(tree, nodes))
        first = results[trees[0][0]][0]
        print(f"\n{nodes} nodes: {first['events']} pod events, {first['bytes_per_event']:.0f} bytes each on the wire; "
              f"µs of CPU per event, median of {args.rounds} rounds [range]; load average {os.getloadavg()[0]:.1f}")
        header = "| stage | " + " | ".join(label for label, _ in trees) + (" | after/before |" if len(trees) > 1 else " |")
        print(header)
        print("|---" * (header.count("|") - 1) + "|")
        rows = [("read (line reader)", lambda r: r["read"]),
                ("read in blocks (tried: block_lines)", lambda r: r["read in blocks"]), ("decode (orjson)", lambda r: r["decode"]),
                ("stream = read + decode (KubeApi.stream)", lambda r: r["stream"])]
        rows += [(f"apply {what}", lambda r, w=what: r["apply"][w]) for what in first["apply"]]
        for name, value in rows:
            cells, medians = [], []
            for label, _ in trees:
                values = [value(r) for r in results[label]]
                medians.append(statistics.median(values))
                cells.append(f"{medians[-1]:.1f} [{min(values):.1f}-{max(values):.1f}]")
            ratio = f" | {medians[-1] / medians[0]:.2f}x" if len(trees) > 1 and medians[0] else ""
            print(f"| {name} | " + " | ".join(cells) + ratio + " |")
        for label, _ in trees:
            per_gang_pod = [r["stream"] * 2 + r["apply"]["ADDED gang"] + r["apply"]["MODIFIED gang (bind)"]
                            for r in results[label]]
            per_plain_pod = [r["stream"] * 2 + r["apply"]["ADDED plain"] + r["apply"]["MODIFIED plain (bind)"]
                             for r in results[label]]
            print(f"{label}: per gang pod (2 events: stream + apply) {statistics.median(per_gang_pod):.0f} µs, "
                  f"per plain pod {statistics.median(per_plain_pod):.0f} µs")


if __name__ == "__main__":
    main()
