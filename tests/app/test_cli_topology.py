"""`tas-extender topology`: the demo tree with capacities, cluster files, and clear errors (exit 2)."""
import json
import subprocess
import sys

import pytest

from app.cli import main
from topology.demo import demo_objects


def run(capsys, *argv):
    code = main(["topology", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_demo_shows_racks_capacities_and_node_states(capsys):
    code, out, err = run(capsys, "--demo")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("topology default (kai.scheduler/v1alpha1/Topology): zone > block > rack > host")
    assert "[nvidia.com/gpu usable free/total; (+N) free on NotReady, cordoned or tainted nodes]" in lines[0]

    def figure(name):
        return next(line.split()[1] for line in lines if line.split()[0] == name)

    assert figure("zone-a") == "104/128"          # 128 GPUs; 4 + 4 + 8 in use; NotReady node-16's 8 apart
    assert next(line.split()[2] for line in lines if line.split()[0] == "zone-a") == "(+8)"
    assert figure("a-block-1-rack-1") == "24/32"
    assert figure("b-block-2-rack-1") == "16/32"
    assert figure("node-09") == "0/8"
    assert any("node-16 NotReady" in line for line in lines)
    assert any("node-24 tainted maintenance" in line for line in lines)
    assert any(line.startswith("topology kueue-default (kueue.x-k8s.io/v1beta1/Topology)") for line in lines)


def test_demo_is_the_default_and_other_resources_can_be_shown(capsys):
    assert run(capsys)[1] == run(capsys, "--demo")[1]
    code, out, _ = run(capsys, "--resource", "memory")
    assert code == 0 and "[memory usable free/total" in out
    assert "15168Gi/16Ti (+1Ti)" in out     # zone-a: 16 nodes x 1Ti; 3 pods x 64Gi in use; node-16 apart


def test_an_unknown_resource_lists_the_valid_ones(capsys):
    code, out, err = run(capsys, "--resource", "example.com/fpga")
    assert code == 2 and out == ""
    assert "example.com/fpga" in err and "valid: cpu, memory, pods, " in err
    assert {"nvidia.com/gpu", "gpu.nvidia.com"} <= set(err.split("valid: ")[1].strip().split(", "))


def test_a_cluster_file(tmp_path, capsys):
    objects = [o for o in demo_objects() if o["kind"] != "Pod"]
    objects[0]["metadata"]["labels"].pop("network.example.com/rack")
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    code, out, err = run(capsys, "--cluster", str(path))
    assert code == 0, err
    assert "a-block-1-rack-1                             24/24" in out
    assert "1 node(s) left out: node-01 (missing level label network.example.com/rack)" in out


def test_a_cluster_file_without_topologies(tmp_path, capsys):
    path = tmp_path / "nodes.yaml"
    path.write_text("kind: Node\nmetadata: {name: a}\nstatus: {allocatable: {cpu: '2'}}\n")
    code, out, _ = run(capsys, "--cluster", str(path))
    assert code == 0 and "no Topology objects found" in out


def test_an_invalid_topology_is_reported(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("kind: Node\nmetadata: {name: a}\n---\n"
                    "apiVersion: kai.scheduler/v1alpha1\nkind: Topology\nmetadata: {name: t}\nspec: {levels: []}\n")
    code, out, _ = run(capsys, "--cluster", str(path))
    assert code == 0 and "topology t: INVALID: Topology 't': spec.levels must list" in out


@pytest.mark.parametrize("content, message", [
    (None, "cannot read cluster file"),
    ("kind: [oops", "not valid YAML or JSON"),
    ("- 1\n", "expected a Kubernetes object"),
    ("kind: Node\nmetadata: {name: a}\nstatus: {allocatable: {cpu: two}}\n", "Node 'a' status.allocatable"),
    ("kind: Node\nmetadata: {labels: {a: b}}\n", "Node without metadata.name"),
    ("kind: Node\nmetadata: {name: a}\n---\nkind: Pod\nmetadata: {name: p}\n"
     "spec: {nodeName: a, containers: [{resources: {requests: {memory: 1GB}}}]}\n", "Pod default/p"),
])
def test_a_bad_cluster_file_exits_2_with_a_clear_message(tmp_path, capsys, content, message):
    path = tmp_path / "cluster.yaml"
    if content is not None:
        path.write_text(content)
    code, out, err = run(capsys, "--cluster", str(path))
    assert code == 2 and out == ""
    assert err.startswith("error: ") and str(path) in err and message in err
    assert "Traceback" not in err


def test_demo_and_cluster_are_exclusive(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["topology", "--demo", "--cluster", "x.yaml"])
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_the_console_script_runs():
    result = subprocess.run([sys.executable, "-m", "app.cli", "topology", "--demo"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "a-block-2-rack-2" in result.stdout


def test_free_counts_only_usable_nodes_and_shows_the_rest_apart(capsys):
    """Issue 16 item 2: NotReady node-16 and tainted node-24 are not free capacity; a taint on an extended
    resource (nvidia.com/gpu, tolerated by admission for the pods that request it) does not count."""
    from app.cluster_file import load_cluster

    cluster = load_cluster(None)
    usable, unusable = cluster.usable_free()
    gpu = cluster.resources.column["nvidia.com/gpu"]
    stranded = {cluster.nodes[i].name for i in range(len(cluster.nodes)) if unusable[i, gpu]}
    assert stranded == {"node-16", "node-24"}
    node = cluster.nodes[cluster.node_index["node-05"]]
    cluster.nodes[cluster.node_index["node-05"]] = type(node)(
        node.name, node.labels, node.allocatable, taints=({"key": "nvidia.com/gpu", "value": "present",
                                                          "effect": "NoSchedule"},))
    assert not cluster.unusable_nodes()[cluster.node_index["node-05"]]
    assert main(["topology", "--demo"]) == 0
    out = capsys.readouterr().out
    assert "a-block-2-rack-2                        24/32 (+8)" in out
    assert "zone-a                                    104/128 (+8)" in out
