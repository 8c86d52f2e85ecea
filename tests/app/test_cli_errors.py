"""Issue 16 item 4: bad input ends in one line naming the file or field, with the documented exit code;
never a traceback. And the small things a new user looks for: --version, descriptions, GET /."""
from __future__ import annotations

import paths
import logging
import os

import pytest

from app.cli import build_parser, main
from app.kube.client import KubeApiError
from app.kube.sync import KubeSource
from app.logs import JsonFormatter
from app.settings import Settings

from service_helpers import make_client


def run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    err = capsys.readouterr().err
    return code, err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def files(tmp_path):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00kind: Node")
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [\n")
    return binary, broken


def test_serve_with_a_missing_kubeconfig(capsys):
    code, err = run(capsys, "serve", "--kubeconfig", "/nonexistent/kubeconfig")
    assert code == 2 and one_line(err) == "error: --kubeconfig /nonexistent/kubeconfig: no such file"


def test_serve_with_a_malformed_kubeconfig(capsys, files):
    code, err = run(capsys, "serve", "--kubeconfig", str(files[1]))
    assert code == 2 and one_line(err).startswith(f"error: --kubeconfig {files[1]}: ")


def test_serve_in_cluster_outside_a_pod(capsys, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, err = run(capsys, "serve", "--in-cluster")
    assert code == 2 and "--in-cluster: " in one_line(err) and "--kubeconfig" in err


def test_serve_with_missing_tls_files(capsys):
    code, err = run(capsys, "serve", "--tls-cert", "/nope/tls.crt", "--tls-key", "/nope/tls.key")
    assert code == 2 and "--tls-cert /nope/tls.crt" in one_line(err)


@pytest.mark.parametrize("command", [["serve", "--cluster"], ["topology", "--cluster"]])
def test_a_bad_cluster_file_is_one_line(capsys, files, command):
    code, err = run(capsys, *command, str(files[1]))
    assert code == 2 and one_line(err).startswith(f"error: cluster file {files[1]}: not valid YAML or JSON")


def test_serve_checks_its_inputs_before_its_ports(capsys, files, tmp_path):
    """A bad cluster file, settings or certificate is exit 2 even while another process holds the port."""
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        code, err = run(capsys, "serve", "--port", port, "--cluster", str(files[1]))
        assert code == 2 and one_line(err).startswith(f"error: cluster file {files[1]}: not valid YAML or JSON")
        code, err = run(capsys, "serve", "--port", port, "--tls-cert", "/nope/tls.crt", "--tls-key", "/nope/k")
        assert code == 2 and one_line(err).startswith("error: --tls-cert /nope/tls.crt")
        code, err = run(capsys, "serve", "--port", port, "--reservation-ttl", "-5")
        assert code == 2 and "--reservation-ttl" in one_line(err)


def test_a_file_that_is_not_utf8_names_the_file(capsys, files):
    code, err = run(capsys, "topology", "--cluster", str(files[0]))
    assert code == 2 and one_line(err) == f"error: cluster file {files[0]} is not UTF-8 text (byte 0 is 0xff); " \
                                          "expected UTF-8 YAML or JSON"
    code, err = run(capsys, "plan", "--cluster", str(files[1]).replace("broken", "binary"),
                    "--workload", str(files[0]))
    assert code == 2 and "not UTF-8 text" in one_line(err)


def test_a_reader_that_goes_away_ends_the_command_quietly(capsys, monkeypatch):
    class ClosedPipe:
        def write(self, _text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self):
            return os.open(os.devnull, os.O_WRONLY)
    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert main(["topology", "--demo"]) == 0
    assert capsys.readouterr().err == ""


def test_version_and_a_description_for_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("tas-extender ")
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    for name, parser in subparsers.choices.items():
        assert parser.description, f"{name} has no description"


def test_a_node_with_a_bad_quantity_is_refused_naming_the_field():
    client = make_client()
    answer = client.post("/debug/objects", content="apiVersion: v1\nkind: Node\nmetadata: {name: n9}\n"
                                                   "status: {allocatable: {nvidia.com/gpu: eight}}\n")
    assert answer.status_code == 422
    assert "Node 'n9' status.allocatable['nvidia.com/gpu']: quantity 'eight'" in answer.json()["detail"]


def test_the_root_points_to_the_page():
    answer = make_client().get("/", follow_redirects=False)
    assert answer.status_code == 307 and answer.headers["location"] == "ui"


def test_logs_carry_no_ansi_copy_of_the_message():
    record = logging.LogRecord("uvicorn.error", logging.INFO, "", 0, "Started server process", (), None)
    record.color_message = "Started server process [\x1b[36m%d\x1b[0m]"
    assert "color_message" not in JsonFormatter().format(record)


def test_an_unreachable_api_server_is_logged_once_per_backoff_step(caplog):
    source = KubeSource(api=None, sink=None, kinds=())
    down = KubeApiError(0, "ConnectionError", "GET /api/v1/nodes: connection refused")
    with caplog.at_level(logging.DEBUG, logger="app.kube.sync"):
        for name in ("nodes", "pods", "jobs.batch", "tfjobs.kubeflow.org"):
            source._log_failure(name, down, delay=2.0)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1


def test_standalone_listens_on_loopback_by_default_a_cluster_service_on_every_interface(monkeypatch):
    monkeypatch.delenv("TAS_HOST", raising=False)
    assert Settings().host == "127.0.0.1"
    assert Settings(kubeconfig="/some/kubeconfig").host == "0.0.0.0"
    assert Settings(host="0.0.0.0").host == "0.0.0.0"


# --- input audit: malformed cluster files and workloads end in one line naming the field ---------------------

FIXTURES = str(paths.FIXTURES / "offline")
CLUSTER_NODE = ("apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {kubernetes.io/hostname: n1}}\n"
                "status: {allocatable: {cpu: '8', nvidia.com/gpu: '8'}}\n")
BAD_CLUSTERS = [
    ("kind: Node\nmetadata: x\n", "Node metadata='x' is invalid; expected a mapping"),
    ("kind: Node\nmetadata: {name: 5}\n", "Node without metadata.name (a non-empty string)"),
    ("kind: Node\nmetadata: {name: n1}\nstatus: x\n", "Node 'n1' status='x' is invalid; expected a mapping"),
    ("kind: Node\nmetadata: {name: n1, labels: [a]}\n", "Node 'n1' metadata.labels=['a'] is invalid"),
    ("kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: [1]}\n", "status.allocatable=[1] is invalid"),
    ("kind: Node\nmetadata: {name: n1}\nstatus: {conditions: x}\n", "status.conditions='x' is invalid"),
    ("kind: Node\nmetadata: {name: n1}\nspec: {taints: [5]}\n", "spec.taints=[5] is invalid"),
    ("kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '-1'}}\n",
     "Node 'n1' status.allocatable['cpu']: quantity '-1' is negative; expected an amount >= 0"),
    ("kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {nvidia.com/gpu: 100Ei}}\n",
     "quantity '100Ei' is too large; expected at most 2^63-1 units"),
    (CLUSTER_NODE + "---\nkind: Pod\nmetadata: {name: p}\nspec: {nodeName: n1}\nstatus: x\n",
     "Pod default/p.status must be an object"),
    (CLUSTER_NODE + "---\nkind: Pod\nmetadata: {name: p}\nspec: {nodeName: n1, tolerations: x}\n",
     "Pod default/p.spec.tolerations='x' is invalid; expected a list of objects"),
    (CLUSTER_NODE + "---\nkind: Pod\nmetadata: {name: p}\nspec: {nodeName: n1, containers: "
                    "[{resources: {requests: {cpu: '-1'}}}]}\n", "quantity '-1' is negative"),
    ("kind: 5\n", "object 'kind' must be a non-empty string"),
    ("kind: List\nitems: x\n", "a List's items must be a list of objects, got 'x'"),
    (CLUSTER_NODE + "---\n" + CLUSTER_NODE, "Node 'n1' appears more than once; names must be unique"),
    (CLUSTER_NODE + "---\nkind: Pod\nmetadata: {name: p, namespace: a}\n---\nkind: Pod\nmetadata: {name: p}\n"
     "---\nkind: Pod\nmetadata: {name: p, namespace: default}\n", "Pod default/p appears more than once"),
    ("[" * 5000 + "]" * 5000, "nested too deeply"),
]


@pytest.mark.parametrize("text, message", BAD_CLUSTERS)
def test_a_malformed_cluster_object_is_one_line_naming_the_field(capsys, tmp_path, text, message):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(text)
    code, err = run(capsys, "topology", "--cluster", str(cluster))
    assert code == 2 and one_line(err).startswith(f"error: cluster file {cluster}") and message in err


def test_a_topology_with_a_spec_that_is_not_a_mapping_is_reported_invalid(capsys, tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER_NODE + "---\napiVersion: kai.scheduler/v1alpha1\nkind: Topology\n"
                       "metadata: {name: t}\nspec: x\n---\napiVersion: topology.volcano.sh/v1alpha1\n"
                       "kind: HyperNode\nmetadata: {name: h}\nspec: x\n")
    assert main(["topology", "--cluster", str(cluster)]) == 0
    out = capsys.readouterr().out
    assert "topology t: INVALID: Topology 't': spec='x' is invalid; expected a mapping" in out
    assert "topology volcano: INVALID: HyperNode 'h': spec='x' is invalid; expected a mapping" in out


WORKER = ["spec", "pytorchReplicaSpecs", "Worker"]
BAD_WORKLOADS = [
    (["metadata"], "x", "metadata='x' is invalid; expected a mapping"),
    (["metadata", "annotations"], ["x"], "metadata.annotations=['x'] is invalid; expected a mapping"),
    (["spec"], "x", "spec='x' is invalid; expected a mapping"),
    ([*WORKER, "template", "spec"], "x", "spec.pytorchReplicaSpecs.Worker.template.spec='x' is invalid"),
    ([*WORKER, "template", "metadata"], "x", "spec.pytorchReplicaSpecs.Worker.template.metadata='x' is invalid"),
    (["spec", "runPolicy"], "x", "spec.runPolicy='x' is invalid; expected a mapping"),
    (["spec", "elasticPolicy"], "x", "spec.elasticPolicy='x' is invalid; expected a mapping"),
    ([*WORKER, "template", "spec", "tolerations"], "x", "spec.tolerations='x' is invalid; expected a list"),
    ([*WORKER, "template", "spec", "affinity"], "x", "spec.affinity='x' is invalid"),
    ([*WORKER, "template", "spec", "affinity"],
     {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
         {"matchExpressions": "x"}]}}}, "nodeSelectorTerms[0].matchExpressions='x' is invalid"),
    ([*WORKER, "template", "spec", "nodeSelector"], ["a"], "spec.nodeSelector=['a'] is invalid"),
    ([*WORKER, "template", "spec", "containers", 0, "resources", "requests", "cpu"], "-1",
     "quantity '-1' is negative; expected an amount >= 0"),
    ([*WORKER, "replicas"], 10**9, "is more than one workload can have here; expected at most 100000"),
]


@pytest.mark.parametrize("path, value, message", BAD_WORKLOADS)
def test_a_malformed_workload_is_one_line_naming_the_field(capsys, tmp_path, path, value, message):
    import yaml
    with open(os.path.join(FIXTURES, "pytorchjob.yaml")) as source:
        workload = yaml.safe_load(source)
    parent = workload
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    file = tmp_path / "job.yaml"
    file.write_text(yaml.safe_dump(workload))
    code, err = run(capsys, "plan", "--cluster", os.path.join(FIXTURES, "cluster.yaml"), "--workload", str(file))
    assert code == 2 and one_line(err).startswith(f"error: workload file {file}: PyTorchJob ") and message in err


def test_a_podgroup_with_a_spec_that_is_not_a_mapping_names_the_field(capsys, tmp_path):
    file = tmp_path / "pg.yaml"
    file.write_text("apiVersion: scheduling.run.ai/v2alpha2\nkind: PodGroup\nmetadata: {name: pg}\nspec: x\n---\n"
                    "apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {pod-group-name: pg}}\n"
                    "spec: {containers: [{name: m}]}\n")
    code, err = run(capsys, "plan", "--cluster", os.path.join(FIXTURES, "cluster.yaml"), "--workload", str(file))
    assert code == 2 and "PodGroup default/pg: group 'pg': spec='x' is invalid; expected a mapping" in one_line(err)


@pytest.mark.parametrize("levels, reason", [
    ("[]", "spec.levels must list at least one level"),
    ("[5]", "levels[0]"),
])
def test_a_workload_naming_an_invalid_topology_is_told_why_it_is_invalid(capsys, tmp_path, levels, reason):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER_NODE + "---\napiVersion: kai.scheduler/v1alpha1\nkind: Topology\n"
                       f"metadata: {{name: broken}}\nspec: {{levels: {levels}}}\n")
    job = tmp_path / "job.yaml"
    job.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, annotations: "
                   "{kai.scheduler/topology: broken, kai.scheduler/topology-required-placement: rack}}\n"
                   "spec: {parallelism: 1, template: {spec: {containers: [{name: m}]}}}\n")
    code, err = run(capsys, "plan", "--cluster", str(cluster), "--workload", str(job))
    line = one_line(err)
    assert code == 2 and "topology='broken' names an invalid topology: " in line and reason in line, line


@pytest.mark.parametrize("text, where", [("kind: Job\nmetadata:\n  name: [x\n", "line 4, column 1: did not find expected"),
                                         ("kind: Job\n\tmetadata: x\n", "line 2, column 1: found a tab character")])
def test_a_workload_file_that_is_not_yaml_is_one_line_saying_where(capsys, tmp_path, text, where):
    file = tmp_path / "job.yaml"
    file.write_text(text)
    code, err = run(capsys, "plan", "--cluster", os.path.join(FIXTURES, "cluster.yaml"), "--workload", str(file))
    assert code == 2
    assert one_line(err).startswith(f"error: workload file {file}: not valid YAML or JSON: {where}")
    assert "<unicode string>" not in err


def test_serve_help_states_both_host_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default 127.0.0.1 standalone, 0.0.0.0 with a cluster" in text


def test_a_port_in_use_is_one_line_naming_it_and_exit_code_3(capsys):
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = run(capsys, "serve", "--port", str(port))
    assert code == 3
    assert one_line(err) == f"error: --host 127.0.0.1 --port {port}: address already in use"


def test_the_documented_exit_codes_include_3():
    text = " ".join(open(paths.ROOT / "docs" / "service.md").read().split())
    assert "`3` the service could not listen" in text
