"""Exclusive placement (LWS exclusive-topology / subgroup-exclusive-topology) on a real-looking cluster:
a domain is taken only by pods of another LWS group or another exclusive gang, as upstream LWS's
anti-affinity says (`group-key Exists, NotIn <own>`), never by a DaemonSet pod or an unrelated small pod."""
from __future__ import annotations

from grouper import expand_pods
from service_helpers import GPU, domain_of, filter_, make_client, schedule
from topology.demo import demo_objects

BLOCK, RACK = "network.example.com/block", "network.example.com/rack"


def lws(name: str, size: int = 4, subgroup: int = 2, gpus: int = 1) -> dict:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": "serving", "uid": f"uid-{name}", "resourceVersion": "1",
                     "annotations": {"leaderworkerset.sigs.k8s.io/exclusive-topology": BLOCK,
                                     "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": RACK}},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {
            "size": size, "subGroupPolicy": {"subGroupSize": subgroup},
            "workerTemplate": {"spec": {"containers": [
                {"name": "main", "image": "vllm", "resources": {"limits": {GPU: str(gpus)}}}]}}}},
    }


def lws_pods(workload: dict) -> list[dict]:
    pods = expand_pods(workload)
    for pod in pods:
        pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}"
        pod["status"] = {"phase": "Pending"}
    return pods


def daemon_pods(objects: list[dict]) -> list[dict]:
    """A 10m-CPU device-plugin DaemonSet pod bound and running on every node."""
    nodes = [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"device-plugin-{node}", "namespace": "kube-system", "uid": f"uid-dp-{node}",
                          "labels": {"app": "device-plugin"},
                          "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "device-plugin",
                                               "uid": "uid-ds", "controller": True}]},
             "spec": {"nodeName": node, "priority": 2000001000,
                      "containers": [{"name": "plugin", "image": "plugin", "resources": {"requests": {"cpu": "10m"}}}]},
             "status": {"phase": "Running"}} for node in nodes]


def test_exclusive_lws_places_beside_daemonset_pods_on_every_node():
    objects = demo_objects()
    workload = lws("svc")
    client = make_client(workload, objects=objects + daemon_pods(objects))
    nodes = [schedule(client, pod) for pod in lws_pods(workload)]
    assert len({domain_of(client, node, "block") for node in nodes}) == 1


def test_a_1_leader_3_worker_lws_with_subgroups_of_2_places_on_an_empty_cluster():
    objects = [o for o in demo_objects() if o["kind"] != "Pod"]
    workload = lws("svc")
    client = make_client(workload, objects=objects)
    leader, w1, w2, w3 = [schedule(client, pod) for pod in lws_pods(workload)]
    # upstream subgroups for size 4, subGroupSize 2: {leader, worker 1}, {worker 2, worker 3}
    assert domain_of(client, w2, "rack") == domain_of(client, w3, "rack")


def test_a_pod_of_another_lws_group_still_takes_the_domain():
    objects = demo_objects()
    first, second = lws("first", gpus=8), lws("second", gpus=8)
    client = make_client(first, second, objects=objects + daemon_pods(objects))
    first_nodes = [schedule(client, pod) for pod in lws_pods(first)]
    second_nodes = [schedule(client, pod) for pod in lws_pods(second)]
    first_blocks = {domain_of(client, node, "block") for node in first_nodes}
    second_blocks = {domain_of(client, node, "block") for node in second_nodes}
    assert len(first_blocks) == len(second_blocks) == 1 and not first_blocks & second_blocks


def test_unrelated_running_pods_do_not_take_a_domain():
    objects = demo_objects()        # 7 plain running pods spread over the blocks
    client = make_client(lws("svc"), objects=objects)
    answer = filter_(client, lws_pods(lws("svc"))[0])
    assert answer["Error"] == "" and answer["NodeNames"]


def test_the_service_and_the_offline_tools_count_the_same_occupancy():
    """Issue 29: one count of exclusive occupancy (topology.Cluster.apart_count over pods marked by one
    rule). Running pods of another LWS group take their nodes, in the service and in `plan`'s cluster alike;
    the gang's own reservations do not count for it, another exclusive gang's do."""
    from app.cluster_file import cluster_of
    from app.scheduling import planning
    from app.scheduling.occupancy import occupied_count
    from service_helpers import service
    from topology.objects import ClusterObjects

    objects = demo_objects()
    running = lws_pods(lws("first", gpus=8))
    for pod, node in zip(running, ["node-01", "node-02", "node-09", "node-10"]):
        pod["spec"]["nodeName"], pod["status"] = node, {"phase": "Running"}
    cluster_objects = objects + daemon_pods(objects) + running
    second, third = lws("second", gpus=8), lws("third", gpus=8)
    client = make_client(second, third, objects=cluster_objects)
    state = service(client)
    tree = planning.identify(state, lws_pods(second)[0]).tree
    offline = cluster_of(ClusterObjects.from_objects(cluster_objects))
    taken = occupied_count(state, tree) > 0
    assert [state.cluster.node_names[i] for i in taken.nonzero()[0]] == ["node-01", "node-02", "node-09", "node-10"]
    assert taken.tolist() == offline.apart_nodes(tree.key).tolist()
    planned = {schedule(client, pod) for pod in lws_pods(second)}
    assert not (occupied_count(state, tree) > 0)[[state.cluster.node_index[n] for n in planned]].any()
    other = planning.identify(state, lws_pods(third)[0]).tree
    assert (occupied_count(state, other) > 0)[[state.cluster.node_index[n] for n in planned]].all()
