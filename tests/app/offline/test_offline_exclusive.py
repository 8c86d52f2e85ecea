"""Exclusive LeaderWorkerSets in the offline tools: only pods of other LWS groups and of other exclusive
gangs take a domain from them, as in the service (grouper/exclusive.py) and upstream's anti-affinity.
Both tools took a domain from an exclusive gang for any pod in it (background pods, plain jobs).

Cluster (tests/fixtures/offline/cluster.yaml): racks b1-r1 (n1 with 4 GPUs used by `busy`, n2), b1-r2
(n3, n4), b2-r1 (n5, n6), b2-r2 (n7, n8 tainted), nodes of 8 GPUs."""
from __future__ import annotations

import paths
import json
from pathlib import Path

import yaml

from app.cli import main
from app.cluster_file import load_cluster
from app.offline.policies import get_policy
from app.offline.simulate import Simulation
from app.offline.trace import parse_trace

CLUSTER = str(paths.FIXTURES / "offline" / "cluster.yaml")


def write(tmp_path: Path, name: str, *objects) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def job(name: str, gpus: int) -> dict:
    """One pod of `gpus` GPUs, required in one rack."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "team", "annotations": {
                "kai.scheduler/topology": "default", "kai.scheduler/topology-required-placement": "rack"}},
            "spec": {"parallelism": 1, "completions": 1, "completionMode": "Indexed",
                     "template": {"spec": {"restartPolicy": "Never", "containers": [{
                         "name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}

def lws(name: str, gpus: int = 4) -> dict:
    """One group of a leader and a worker, exclusive per rack."""
    template = {"spec": {"containers": [{"name": "main", "image": "x",
                                         "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": "team", "annotations": {
                "leaderworkerset.sigs.k8s.io/exclusive-topology": "example.com/rack"}},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": template}}}


def running_pod(name: str, node: str, labels: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "other", "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x", "resources": {
                "limits": {"nvidia.com/gpu": "1"}}}]}, "status": {"phase": "Running"}}


def cluster_with(tmp_path: Path, *pods: dict) -> str:
    objects = list(yaml.safe_load_all(Path(CLUSTER).read_text()))
    objects = [item for obj in objects for item in (obj["items"] if obj.get("kind") == "List" else [obj])]
    return write(tmp_path, "cluster.yaml", *objects, *pods)


def racks_of(gang: dict) -> set[str]:
    return {pod["domains"]["rack"] for pod in gang["pods"]}


def plan_json(capsys, cluster: str, workloads: str) -> tuple[int, list[dict]]:
    code = main(["plan", "--cluster", cluster, "--workload", workloads, "-o", "json"])
    return code, json.loads(capsys.readouterr().out)["gangs"]


def test_unrelated_pods_do_not_take_a_rack_from_an_exclusive_lws(tmp_path, capsys):
    """Every rack runs some pod (n1's `busy` and one per other rack): upstream's anti-affinity repels only
    pods of other LWS groups, so the group still gets a rack. It was refused: any pod took a rack."""
    cluster = cluster_with(tmp_path, running_pod("p3", "n3"), running_pod("p5", "n5"), running_pod("p7", "n7"))
    code, gangs = plan_json(capsys, cluster, write(tmp_path, "lws.yaml", lws("serve")))
    assert code == 0 and gangs[0]["placed"], gangs[0].get("reason")
    assert len(racks_of(gangs[0])) == 1


def test_pods_of_other_lws_groups_take_their_racks(tmp_path, capsys):
    group = {"leaderworkerset.sigs.k8s.io/group-key": "abc"}
    cluster = cluster_with(tmp_path, *(running_pod(f"g{n}", f"n{n}", group) for n in (2, 3, 5)))
    code, gangs = plan_json(capsys, cluster, write(tmp_path, "lws.yaml", lws("serve")))
    assert code == 0 and racks_of(gangs[0]) == {"b2-r2"}


def test_an_exclusive_lws_avoids_another_lws_but_not_a_plain_job(tmp_path, capsys):
    """A plain job held in a rack leaves it to the LWS (it was taken); the second LWS avoids the first."""
    workloads = write(tmp_path, "w.yaml", job("plain", 4), lws("one"), lws("two"))
    code, gangs = plan_json(capsys, CLUSTER, workloads)
    assert code == 0 and all(g["placed"] for g in gangs)
    assert racks_of(gangs[0]) & racks_of(gangs[1])                  # the LWS shares the job's rack
    assert not racks_of(gangs[1]) & racks_of(gangs[2])


def test_simulated_exclusive_lws_share_racks_with_background_pods_but_not_with_each_other(tmp_path):
    """Two LWS groups arrive on a cluster whose every rack runs a background pod: both are placed at once,
    in two racks. They waited for ever: the background pods never finish."""
    cluster = load_cluster(cluster_with(tmp_path, running_pod("p3", "n3"), running_pod("p5", "n5"),
                                        running_pod("p7", "n7")))
    trace = parse_trace([json.dumps({"at": at, "duration": 10, "workload": lws(name)})
                         for at, name in ((0, "one"), (1, "two"))])
    results = Simulation(cluster, get_policy("tas"), trace).run().results()
    assert [r["placed"] for r in results] == [0, 1], [r["reason"] for r in results]
    racks = [{cluster.topology("default").node_path(cluster.node_index[p["node"]])[-1] for p in r["pods"]}
             for r in results]
    assert all(len(r) == 1 for r in racks) and racks[0] != racks[1]
