"""Issue 13 item 6: required pod anti-affinity on kubernetes.io/hostname among a gang's own pods (one pod
per host) is honoured by the plan; kube-scheduler's InterPodAffinity filter would drop doubled-up nodes."""
from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings, strategies as st
from oracle import check_plan
from planner_cases import GPU as GPU_COLUMN, free_matrix, grid_topology, leaf, plan_input, request

from topology.groups import Group
from topology.planner import plan_gang

from grouper.affinity import selects
from grouper.node_limit import node_limit
from topology.demo import demo_objects

from service_helpers import (filter_, indexed_job, job_with_affinity, make_client, plain_pod, refusal, schedule,
                             service)

LABELS = {"app": "serve"}
ONE_PER_HOST = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": LABELS}, "topologyKey": "kubernetes.io/hostname"}]}}


def inference(pods: int = 4, gpus: int = 2) -> tuple[dict, list[dict]]:
    job = indexed_job("serve", pods=pods, gpus=gpus, segment=None, required="zone")
    return job_with_affinity(job, LABELS, ONE_PER_HOST)


def only_nodes(count: int) -> list[dict]:
    """The demo cluster cut to its first `count` nodes, empty (its topologies kept)."""
    objects = [o for o in demo_objects() if o["kind"] != "Pod"]
    nodes = [o for o in objects if o["kind"] == "Node"][:count]
    return [o for o in objects if o["kind"] != "Node"] + nodes


def test_four_pods_one_per_host_spread_over_four_nodes():
    job, pods = inference()
    client = make_client(job, objects=only_nodes(4))
    placed = [schedule(client, pod) for pod in pods]
    assert len(set(placed)) == 4, placed                     # 4 x 2 GPUs would fit on one 8-GPU node


def test_four_pods_one_per_host_on_two_nodes_are_refused_saying_why():
    job, pods = inference()
    client = make_client(job, objects=only_nodes(2))
    answer = filter_(client, pods[0])
    assert answer["NodeNames"] == []
    reason = refusal(answer)
    assert "one pod per node" in reason and "kubernetes.io/hostname" in reason, reason
    assert service(client).cluster.capacity.reserved.sum() == 0


def test_a_term_selecting_other_pods_only_does_not_spread_the_gang():
    job, pods = inference()
    for pod in pods:
        pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
            "labelSelector"] = {"matchLabels": {"app": "batch"}}
    client = make_client(job, objects=only_nodes(4))
    placed = [schedule(client, pod) for pod in pods]
    assert len(set(placed)) == 1                              # binpack: the term does not touch the gang


def test_selector_and_namespace_matching():
    spec = {"affinity": copy.deepcopy(ONE_PER_HOST)}
    assert node_limit(spec, {"app": "serve", "x": "y"}, "team-a").pods == 1
    assert node_limit(spec, {"app": "other"}, "team-a") is None
    spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["namespaces"] = ["b"]
    assert node_limit(spec, LABELS, "team-a") is None
    assert selects({"matchExpressions": [{"key": "app", "operator": "In", "values": ["serve"]}]}, LABELS)
    assert not selects({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, LABELS)
    assert not selects(None, LABELS) and selects({}, LABELS)


def test_planner_keeps_one_pod_per_node_around_a_bound_pod():
    from grouper import group_workload
    from topology.cluster import Cluster
    from topology.nodes import NodeInfo
    from topology.planner import build_plan_input, plan_gang

    objects = only_nodes(4)
    cluster = Cluster([NodeInfo.from_object(o) for o in objects if o["kind"] == "Node"],
                      [o for o in objects if o["kind"] == "Topology"])
    job, _ = inference()
    tree = group_workload(job, cluster.topologies)[0]
    first = next(iter(tree.slots()))
    pinned = build_plan_input(cluster, tree, bound={first: 2}, per_node={first.role: 1})
    plan = plan_gang(pinned)
    assert plan.placed and sorted(plan.slots.values()) == [0, 1, 2, 3]
    packed = plan_gang(build_plan_input(cluster, tree, bound={first: 2}))
    assert set(packed.slots.values()) == {2}                  # without the constraint: all on the bound node


# --- any topology key, and pods already running --------------------------------------------------------
RACK = "network.example.com/rack"


def with_affinity(pods: list[dict], field: str, selector: dict, key: str) -> list[dict]:
    for pod in pods:
        pod["spec"]["affinity"] = {field: {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": selector}, "topologyKey": key}]}}
    return pods


def running_pod(name: str, node: str, labels: dict) -> dict:
    pod = plain_pod(name, cpu="1", namespace="team-a")        # the terms name no namespace: the pod's own
    pod["metadata"]["labels"] = labels
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    return pod


def rack_of(client, node: str) -> str:
    state = service(client)
    return state.cluster.nodes[state.cluster.node_index[node]].labels[RACK]


def test_pods_attracting_each_other_on_the_rack_key_share_one_rack():
    """Required pod affinity to their own label on the rack key: the role's pods must share one rack, as
    kube-scheduler's InterPodAffinity filter will demand. 4 x 8 GPUs fit in a rack of 4 nodes; 6 do not,
    and are refused rather than planned over two racks (which they are without the term)."""
    job, pods = inference(pods=4, gpus=8)
    with_affinity(pods, "podAffinity", LABELS, RACK)
    client = make_client(job, objects=only_nodes(8), strategy="spread")
    placed = [schedule(client, pod) for pod in pods]
    assert all(placed) and len({rack_of(client, node) for node in placed}) == 1, placed

    job, pods = inference(pods=6, gpus=8)
    for pod in pods:
        del pod["spec"]["affinity"]
    free = make_client(job, objects=only_nodes(8))
    assert len({rack_of(free, schedule(free, pod)) for pod in pods}) == 2          # without the term
    job, pods = inference(pods=6, gpus=8)
    with_affinity(pods, "podAffinity", LABELS, RACK)
    client = make_client(job, objects=only_nodes(8))
    answer = filter_(client, pods[0])
    assert answer["NodeNames"] == [] and "rack" in refusal(answer)


@pytest.mark.parametrize("field, pods, runs_on", [
    ("podAntiAffinity", 4, "node-01"),     # repelled by a pod in rack 1: the gang goes to rack 2
    ("podAffinity", 2, "node-07"),         # drawn to a pod in rack 2 (binpack alone would pick rack 1)
])
def test_terms_about_running_pods_choose_the_rack(field, pods, runs_on):
    job, made = inference(pods=pods, gpus=8)
    with_affinity(made, field, {"app": "other"}, RACK)
    client = make_client(job, objects=only_nodes(8) + [running_pod("other", runs_on, {"app": "other"})])
    placed = [schedule(client, pod) for pod in made]
    assert all(placed) and {rack_of(client, node) for node in placed} == {"a-block-1-rack-2"}, placed


def test_affinity_to_pods_that_run_nowhere_is_refused_saying_why():
    job, pods = inference(pods=2, gpus=8)
    with_affinity(pods, "podAffinity", {"app": "absent"}, RACK)
    client = make_client(job, objects=only_nodes(8))
    answer = filter_(client, pods[0])
    assert answer["NodeNames"] == []
    assert "pod affinity" in refusal(answer)


def test_pods_repelling_each_other_on_the_rack_key_land_one_per_rack():
    """Required anti-affinity to their own label on the rack key: one pod per rack, as kube-scheduler's
    InterPodAffinity filter will demand; binpack alone would put all of them in one rack."""
    job, pods = inference(pods=2, gpus=2)
    with_affinity(pods, "podAntiAffinity", LABELS, RACK)
    client = make_client(job, objects=only_nodes(8))
    placed = [schedule(client, pod) for pod in pods]
    assert all(placed) and len({rack_of(client, node) for node in placed}) == 2, placed

    job, pods = inference(pods=3, gpus=2)                       # 3 pods, 2 racks: never
    with_affinity(pods, "podAntiAffinity", LABELS, RACK)
    client = make_client(job, objects=only_nodes(8))
    answer = filter_(client, pods[0])
    assert answer["NodeNames"] == []
    reason = refusal(answer)
    assert f"job pods take one {RACK} each (required pod anti-affinity on {RACK})" in reason, reason


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_one_pod_per_domain_is_never_broken_and_placed_when_the_domains_have_room(data):
    """The planner with a role kept one per rack (or block): on random fragmented grids, every plan has at
    most one pod of the role per domain of that level, breaks nothing else (oracle), and a gang is placed
    whenever as many domains as pods have a node with room."""
    shape = (1, data.draw(st.integers(1, 3)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3)))
    topology = grid_topology(shape)
    nodes = len(topology.node_names)
    free = free_matrix(data.draw(st.lists(st.sampled_from([0, 2, 4, 8]), min_size=nodes, max_size=nodes)))
    level = data.draw(st.sampled_from([1, 2]))                   # block or rack
    pods = data.draw(st.integers(1, 5))
    root = Group("job", children=[leaf("job", "w", range(pods))])
    inp = plan_input(root, topology, free, {"w": request(gpu=2, cpu=1000)}, one_per_domain={"w": level})
    plan = plan_gang(inp)
    domains_with_room = {topology.node_domain[level][n] for n in range(nodes) if free[n, GPU_COLUMN] >= 2}
    if not plan.placed:
        assert len(domains_with_room) < pods, plan.reason
        return
    assert check_plan(inp, plan) == []
    used = [topology.node_domain[level][node] for node in plan.slots.values()]
    assert len(used) == len(set(used)) == pods
