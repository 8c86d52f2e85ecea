"""`tas-extender plan` on a small cluster dump: outputs, refusals and exit codes."""
from __future__ import annotations

import paths
import json
from pathlib import Path

import pytest
import yaml

from app.cli import main

FIXTURES = paths.FIXTURES / "offline"
CLUSTER = str(FIXTURES / "cluster.yaml")     # z1 > b1, b2 > 2 racks each > 2 nodes of 8 GPUs; n1 half used, n8 tainted


def job(name: str, pods: int, gpus: int = 8, required: str | None = None, **template_annotations) -> dict:
    annotations = {"kai.scheduler/topology": "default",
                   "kai.scheduler/topology-required-placement": required} if required else {}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "team", "annotations": annotations},
            "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                     "template": {"metadata": {"annotations": template_annotations},
                                  "spec": {"restartPolicy": "Never", "containers": [{
                                      "name": "main", "image": "x",
                                      "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}


def write(tmp_path: Path, name: str, *objects) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def run(capsys, *args) -> tuple[int, str, str]:
    code = main(["plan", "--cluster", CLUSTER, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_placed_table_groups_pods_by_segment(capsys):
    code, out, err = run(capsys, "--workload", str(FIXTURES / "pytorchjob.yaml"))
    assert code == 0, err
    assert "PyTorchJob research/llm-finetune" in out and "PLACED" in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.strip().startswith("SEGMENT"))
    assert lines[header].split() == ["SEGMENT", "ROLE", "INDEX", "NODE", "ZONE", "BLOCK", "RACK"]
    rows = [line.split() for line in lines[header + 1:]]
    # master alone, then each segment of 2 workers, separated by blank lines, each in one rack
    assert [len(r) for r in rows] == [7, 0, 7, 7, 0, 7, 7]
    segments = [r for r in rows if r and r[0].startswith("worker-")]
    assert [(r[0], r[1], r[2]) for r in segments] == [("worker-0", "worker", "0"), ("worker-0", "worker", "1"),
                                                      ("worker-1", "worker", "2"), ("worker-1", "worker", "3")]
    assert segments[0][6] == segments[1][6] and segments[2][6] == segments[3][6]


def test_json_output_lists_every_pod_with_its_domains(capsys):
    code, out, _ = run(capsys, "--workload", str(FIXTURES / "pytorchjob.yaml"), "-o", "json")
    assert code == 0
    document = json.loads(out)
    assert document["placed"] is True
    (gang,) = document["gangs"]
    assert gang["gang"] == "research/pg-llm-finetune" and gang["topology"] == "default"
    pods = {(p["role"], p["index"]): p for p in gang["pods"]}
    assert sorted(pods) == [("master", 0)] + [("worker", i) for i in range(4)]
    assert all(set(p["domains"]) == {"zone", "block", "rack"} for p in pods.values())
    nodes = [p["node"] for p in pods.values()]
    assert len(set(nodes) - {"n1"}) == 4 and "n8" not in nodes         # n8 is tainted
    # segments in one rack each
    assert pods[("worker", 0)]["domains"]["rack"] == pods[("worker", 1)]["domains"]["rack"]
    assert pods[("worker", 2)]["domains"]["rack"] == pods[("worker", 3)]["domains"]["rack"]


def test_refusal_is_explained_and_exits_1(capsys):
    code, out, _ = run(capsys, "--workload", str(FIXTURES / "wide-job.yaml"))
    assert code == 1
    assert "Job team/wide" in out and "NOT PLACED" in out
    assert "fits 3 of 4 pods" in out                     # each block holds 3 pods of 8 GPUs


def test_refusal_in_json(tmp_path, capsys):
    code, out, _ = run(capsys, "--workload", write(tmp_path, "wide.yaml", job("wide", 4, required="block")),
                       "-o", "json")
    document = json.loads(out)
    assert code == 1 and document["placed"] is False
    assert document["gangs"][0]["pods"] == [] and "3 of 4" in document["gangs"][0]["reason"]


def test_gangs_see_what_earlier_gangs_took(tmp_path, capsys):
    # two blocks of 3 pods each: two 3-pod jobs fit, a third job has no room left
    path = write(tmp_path, "three.yaml", job("a", 3, required="block"), job("b", 3, required="block"),
                 job("c", 1))
    code, out, _ = run(capsys, "--workload", path, "-o", "json")
    gangs = json.loads(out)["gangs"]
    assert code == 1
    assert [g["placed"] for g in gangs] == [True, True, False]
    blocks = [{p["domains"]["block"] for p in g["pods"]} for g in gangs[:2]]
    assert blocks[0] != blocks[1] and all(len(b) == 1 for b in blocks)


def test_several_workload_files_and_plain_workloads(tmp_path, capsys):
    first = write(tmp_path, "a.yaml", job("plain", 2))
    second = write(tmp_path, "b.yaml", job("small", 1, gpus=4))
    code, out, _ = run(capsys, "--workload", first, second, "-o", "json")
    gangs = json.loads(out)["gangs"]
    assert code == 0 and [g["workload"] for g in gangs] == ["Job team/plain", "Job team/small"]
    assert [(p["role"], p["index"]) for p in gangs[0]["pods"]] == [("job", 0), ("job", 1)]


def test_podgroup_with_its_pods(tmp_path, capsys):
    podgroup = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                "metadata": {"name": "pg", "namespace": "team"},
                "spec": {"minMember": 2, "topologyConstraint": {"topology": "default",
                                                                "requiredTopologyLevel": "rack"}}}
    pods = [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"p-{i}", "namespace": "team", "annotations": {"pod-group-name": "pg"}},
             "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
            for i in range(2)]
    code, out, err = run(capsys, "--workload", write(tmp_path, "pg.yaml", podgroup, *pods), "-o", "json")
    assert code == 0, err
    (gang,) = json.loads(out)["gangs"]
    assert gang["workload"] == "PodGroup team/pg" and len(gang["pods"]) == 2
    assert len({p["domains"]["rack"] for p in gang["pods"]}) == 1


def test_pod_naming_a_missing_podgroup_is_bad_input(tmp_path, capsys):
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "team", "annotations": {"pod-group-name": "nope"}},
           "spec": {"containers": [{"name": "c"}]}}
    code, _, err = run(capsys, "--workload", write(tmp_path, "pod.yaml", pod, job("a", 1)))
    assert code == 2 and "Pod team/p names PodGroup 'nope'" in err and "pod.yaml" in err


@pytest.mark.parametrize("content, expected", [
    ("kind: Job\n  bad: [\n", "not valid YAML or JSON"),
    ("", "no objects found"),
    ("- 3\n", "expected a Kubernetes object"),
])
def test_unreadable_workloads_exit_2(tmp_path, capsys, content, expected):
    path = tmp_path / "w.yaml"
    path.write_text(content)
    code, out, err = run(capsys, "--workload", str(path))
    assert code == 2 and out == ""
    assert f"workload file {path}" in err and expected in err


def test_invalid_annotations_exit_2_naming_the_annotation(tmp_path, capsys):
    bad = job("seg", 4, required="block", **{"kai.scheduler/segment-size": "abc"})
    code, _, err = run(capsys, "--workload", write(tmp_path, "seg.yaml", bad))
    assert code == 2 and "kai.scheduler/segment-size" in err and "seg.yaml" in err


def test_unknown_level_exit_2_listing_valid_levels(tmp_path, capsys):
    code, _, err = run(capsys, "--workload", write(tmp_path, "lvl.yaml", job("l", 2, required="galaxy")))
    assert code == 2 and "unknown level 'galaxy'" in err and "valid levels" in err


def test_missing_files_exit_2(tmp_path, capsys):
    code, _, err = run(capsys, "--workload", str(tmp_path / "none.yaml"))
    assert code == 2 and "cannot read workload file" in err
    code = main(["plan", "--cluster", str(tmp_path / "none.yaml"), "--workload", CLUSTER])
    assert code == 2 and "cannot read cluster file" in capsys.readouterr().err


def test_cluster_objects_are_not_workloads(tmp_path, capsys):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n9"}}
    code, _, err = run(capsys, "--workload", write(tmp_path, "node.yaml", node))
    assert code == 2 and "Node default/n9 is not a workload" in err and "--cluster" in err


def test_files_without_workloads_are_bad_input(tmp_path, capsys):
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    code, _, err = run(capsys, "--workload", write(tmp_path, "cm.yaml", config))
    assert code == 2 and "no workload found" in err



def test_host_network_ports_and_hostname_spread_hold_pods_per_node_as_the_service_does(tmp_path, capsys):
    """4 pods of 2 GPUs pack onto one 8-GPU node; a host port takes one per node, a hostname spread of
    maxSkew 2 (selecting the template's labels) two per node (grouper/node_limit.py, as in the service)."""
    hostnet = job("hostnet", 4, gpus=2, required="block")
    template = hostnet["spec"]["template"]["spec"]
    template["hostNetwork"] = True
    template["containers"][0]["ports"] = [{"containerPort": 29500}]
    spread = job("spread", 4, gpus=2, required="block")
    spread["spec"]["template"]["metadata"]["labels"] = {"app": "spread"}
    spread["spec"]["template"]["spec"]["topologySpreadConstraints"] = [{
        "maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}}}]
    plain = job("plain", 4, gpus=2, required="block")
    nodes = {}
    for workload in (hostnet, spread, plain):
        code, out, err = run(capsys, "--workload", write(tmp_path, f"{workload['metadata']['name']}.yaml", workload),
                             "-o", "json")
        assert code == 0, err
        (gang,) = json.loads(out)["gangs"]
        nodes[workload["metadata"]["name"]] = [pod["node"] for pod in gang["pods"]]
    assert len(set(nodes["hostnet"])) == 4
    assert sorted(nodes["spread"].count(node) for node in set(nodes["spread"])) == [2, 2]
    assert len(set(nodes["plain"])) == 1


def test_a_gang_without_topology_on_one_node_is_named_by_that_node(tmp_path, capsys):
    """A Job without kai.scheduler/topology that lands on one node names the node, not its index."""
    workload = write(tmp_path, "j.yaml", job("j", 1))
    code, out, err = run(capsys, "--workload", workload)
    assert code == 0, err
    node = next(line.split()[3] for line in out.splitlines() if line.startswith("  -  "))
    assert f"  group pg-j: node {node}" in out.splitlines()
    code, out, _ = run(capsys, "--workload", workload, "-o", "json")
    gang = json.loads(out)["gangs"][0]
    assert gang["groups"]["pg-j"]["domain"] == gang["pods"][0]["node"] == node
