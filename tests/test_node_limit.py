"""How many pods of a role one node may hold whatever its room (grouper.node_limit), and the gang planned
with it through the extender: kube-scheduler's NodePorts and PodTopologySpread filters would drop a node
holding more (the end-to-end tests show the gang left half bound before)."""
from __future__ import annotations

import copy

from grouper.node_limit import NodeLimit, host_ports, node_limit
from service_helpers import filter_, indexed_job, job_pods, make_client, refusal, schedule
from test_extender_affinity import only_nodes

LABELS = {"app": "serve"}
SPREAD = {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
          "labelSelector": {"matchLabels": LABELS}}


def spec(**fields) -> dict:
    return {"containers": [{"name": "main", "image": "x"}], **fields}


def test_host_ports_hold_a_role_to_one_pod_per_node():
    ports = spec(containers=[{"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080}]},
                             {"name": "b", "ports": [{"containerPort": 9000, "protocol": "UDP"}]}])
    assert host_ports(ports) == ["8080/TCP"]              # a container port alone is no host port
    assert node_limit(ports, LABELS, "ns") == NodeLimit(1, "host port 8080/TCP")


def test_a_host_network_pods_container_ports_are_host_ports():
    hostnet = spec(hostNetwork=True, initContainers=[{"name": "i", "ports": [{"containerPort": 1234}]}],
                   containers=[{"name": "m", "ports": [{"containerPort": 29500, "protocol": "TCP"}]}])
    assert host_ports(hostnet) == ["1234/TCP", "29500/TCP"]
    assert node_limit(hostnet, LABELS, "ns").pods == 1
    assert node_limit(spec(hostNetwork=True), LABELS, "ns") is None       # no port declared


def test_a_hostname_spread_that_selects_the_pod_holds_it_to_max_skew():
    assert node_limit(spec(topologySpreadConstraints=[SPREAD]), LABELS, "ns") == \
        NodeLimit(2, "topology spread on kubernetes.io/hostname, maxSkew 2")
    tighter = dict(SPREAD, maxSkew=1, matchLabelKeys=["pod-template-hash"])
    assert node_limit(spec(topologySpreadConstraints=[SPREAD, tighter]), LABELS, "ns").pods == 1


def test_spreads_that_do_not_bind_are_no_limit():
    for other in (dict(SPREAD, whenUnsatisfiable="ScheduleAnyway"), dict(SPREAD, topologyKey="zone"),
                  dict(SPREAD, labelSelector={"matchLabels": {"app": "other"}}), dict(SPREAD, labelSelector=None),
                  dict(SPREAD, maxSkew="2"), "not a constraint"):
        assert node_limit(spec(topologySpreadConstraints=[other]), LABELS, "ns") is None, other
    assert node_limit(spec(topologySpreadConstraints="wrong type", containers="x"), LABELS, "ns") is None


def test_the_tightest_limit_wins():
    both = spec(topologySpreadConstraints=[dict(SPREAD, maxSkew=3)],
                containers=[{"name": "m", "ports": [{"containerPort": 80, "hostPort": 80}]}])
    assert node_limit(both, LABELS, "ns").pods == 1


def gang(pods: int, gpus: int, **template_spec) -> tuple[dict, list[dict]]:
    job = indexed_job("serve", pods=pods, gpus=gpus, segment=None, required="zone")
    template = job["spec"]["template"]
    template["metadata"]["labels"] = dict(LABELS)
    template["spec"].update(copy.deepcopy(template_spec))
    made = job_pods(job)
    for pod in made:
        pod["metadata"].setdefault("labels", {}).update(LABELS)
        pod["spec"].update(copy.deepcopy(template_spec))
    return job, made


def test_a_spread_gang_is_planned_max_skew_per_node():
    job, pods = gang(8, 1, topologySpreadConstraints=[SPREAD])
    client = make_client(job, objects=only_nodes(4))
    placed = [schedule(client, pod) for pod in pods]
    assert sorted({placed.count(node) for node in placed}) == [2]      # 8 x 1 GPU would fit on one node
    assert len(set(placed)) == 4


def test_a_gang_that_cannot_have_its_limit_is_refused_saying_why():
    """4 hostNetwork pods on a port, 2 nodes: by GPUs they fit on one node; by the port they need 4."""
    job, pods = gang(4, 1, hostNetwork=True)
    for pod in [job["spec"]["template"], *pods]:
        pod["spec"]["containers"][0]["ports"] = [{"containerPort": 29500}]
    client = make_client(job, objects=only_nodes(2))
    answer = filter_(client, pods[0])
    assert answer["NodeNames"] == []
    reason = refusal(answer)
    assert "job pods take one pod per node (host port 29500/TCP)" in reason, reason
