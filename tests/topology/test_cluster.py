"""The cluster model: free = allocatable - bound non-terminated pods - reservations, kept incrementally."""
import copy

import numpy as np
import pytest

from topology.cluster import Cluster, pod_key
from topology.nodes import NodeInfo, PodPlacementRules
from topology.objects import ClusterObjects

GPU = "nvidia.com/gpu"
GI = 2**30


def node_info(name, gpus=8, rack="r1", **kwargs):
    return NodeInfo(name, {"rack": rack}, {"cpu": 32_000, "memory": 256 * GI, GPU: gpus, "pods": 110}, **kwargs)


def pod(name, node, gpus=1, cpu="1", phase="Running", namespace="ml"):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "containers": [
                {"name": "c", "resources": {"requests": {"cpu": cpu}, "limits": {GPU: str(gpus)}}}]},
            "status": {"phase": phase}}


TOPOLOGY = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "racks"},
            "spec": {"levels": [{"nodeLabel": "rack", "alias": "rack"}]}}


def cluster():
    return Cluster([node_info("n2", rack="r2"), node_info("n1"), node_info("n3", gpus=4, rack="r2")], [TOPOLOGY])


def free(c, node, resource=GPU):
    return int(c.free[c.node_index[node], c.resources.column[resource]])


def test_nodes_are_sorted_by_name_and_matrices_follow():
    c = cluster()
    assert c.node_names == ["n1", "n2", "n3"]
    assert c.resources.names == ("cpu", "memory", "pods", GPU)
    assert c.capacity.allocatable[:, c.resources.column[GPU]].tolist() == [8, 8, 4]
    assert c.free.dtype == np.int64 and c.free.shape == (3, 4)
    assert np.array_equal(c.free, c.capacity.allocatable)


def test_bound_running_pods_use_capacity():
    c = cluster()
    assert c.add_pod(pod("a", "n1", gpus=3, cpu="1.5"))
    assert free(c, "n1") == 5 and free(c, "n1", "cpu") == 30_500 and free(c, "n1", "pods") == 109
    assert c.pods["ml/a"].node == 0


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_terminated_pods_use_nothing(phase):
    c = cluster()
    assert not c.add_pod(pod("done", "n1", phase=phase))
    assert free(c, "n1") == 8 and c.pods == {}


def test_unbound_and_unknown_node_pods_use_nothing():
    c = cluster()
    pending = pod("p", "n1")
    del pending["spec"]["nodeName"]
    assert not c.add_pod(pending)
    assert not c.add_pod(pod("elsewhere", "gone-node"))
    assert np.array_equal(c.free, c.capacity.allocatable)


def test_pod_updates_replace_and_deletes_give_back():
    c = cluster()
    tree, matrix = c.topology("racks"), c.free
    c.add_pod(pod("a", "n1", gpus=2))
    c.add_pod(pod("a", "n1", gpus=2))                       # the same pod again: counted once
    assert free(c, "n1") == 6
    c.add_pod(pod("a", "n1", gpus=2, phase="Succeeded"))    # it finished
    assert free(c, "n1") == 8 and "ml/a" not in c.pods
    c.add_pod(pod("b", "n2", gpus=4))
    c.remove_pod("ml/b")
    c.remove_pod("ml/never-seen")
    assert np.array_equal(c.free, c.capacity.allocatable)
    assert not c.capacity.used.any()
    assert c.topology("racks") is tree and c.free is matrix           # updated in place, nothing rebuilt


def test_a_later_version_of_a_bound_pod_is_counted_by_what_it_asks_now():
    """A pod event that changes nothing the request is read from keeps the pod's row; one whose resources
    changed on the same node (an in-place resize), or that moved node, is counted anew."""
    c = cluster()
    c.add_pod(pod("a", "n1", gpus=2))
    kept = c.pods["ml/a"]
    again = pod("a", "n1", gpus=2)
    again["metadata"]["resourceVersion"] = "7"
    again["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert c.add_pod(again) and c.pods["ml/a"] is kept and free(c, "n1") == 6
    assert c.add_pod(pod("a", "n1", gpus=3, cpu="2")) and free(c, "n1") == 5 and free(c, "n1", "cpu") == 30_000
    resized = pod("a", "n1", gpus=3, cpu="2")
    resized["spec"]["initContainers"] = [{"name": "side", "restartPolicy": "Always",
                                          "resources": {"requests": {"cpu": "1"}}}]
    assert c.add_pod(resized) and free(c, "n1", "cpu") == 29_000
    resized = {**resized, "spec": {**resized["spec"], "overhead": {"cpu": "500m"}}}
    assert c.add_pod(resized) and free(c, "n1", "cpu") == 28_500
    resized = {**resized, "spec": {**resized["spec"], "resources": {"requests": {"cpu": "8"}}}}
    assert c.add_pod(resized) and free(c, "n1", "cpu") == 23_500
    sidecar_off = copy.deepcopy(resized)
    del sidecar_off["spec"]["initContainers"][0]["restartPolicy"]        # an init container again
    assert c.add_pod(sidecar_off) and free(c, "n1", "cpu") == 23_500   # pod-level cpu stands for the containers
    sidecar_off["spec"].pop("resources")
    assert c.add_pod(sidecar_off) and free(c, "n1", "cpu") == 29_500      # max(2 + 0, 1) + overhead 0.5
    assert c.add_pod(pod("a", "n2", gpus=3, cpu="2")) and free(c, "n1") == 8 and free(c, "n2") == 5
    c.apart["ml/a"] = "team/gang"
    assert c.add_pod(pod("a", "n2", gpus=3, cpu="2")) and "ml/a" not in c.apart    # marked again by its caller
    assert np.array_equal(c.free, c.capacity.allocatable - c.capacity.used)


def test_pods_of_one_template_share_a_parsed_request_never_its_row():
    c = cluster()
    for name, node in (("a", "n1"), ("b", "n1"), ("c", "n2")):
        assert c.add_pod(pod(name, node, gpus=2))
    rows = [c.pods[f"ml/{name}"].request for name in "abc"]
    assert all(np.array_equal(row, rows[0]) for row in rows) and len({id(row) for row in rows}) == 3
    rows[0][:] = 0                                    # a row changed in place changes no other pod's
    assert c.add_pod(pod("d", "n3", gpus=2)) and int(c.pods["ml/d"].request[c.resources.column[GPU]]) == 2
    bad = pod("e", "n1")
    bad["spec"]["containers"][0]["resources"]["limits"][GPU] = "two"
    with pytest.raises(ValueError, match="Pod ml/e"):
        c.add_pod(bad)
    with pytest.raises(ValueError, match="Pod ml/e"):
        c.add_pod(bad)                                # a refused request is never kept
    odd = pod("f", "n1")
    odd["spec"]["containers"][0]["resources"]["requests"]["cpu"] = 2      # a number, not a string
    assert c.add_pod(odd) and int(c.pods["ml/f"].request[c.resources.column["cpu"]]) == 2000
    changed = pod("g", "n3", gpus=1)
    assert c.add_pod(changed) and free(c, "n3") == 1                 # d holds 2 of its 4
    changed["spec"]["containers"][0]["resources"]["limits"][GPU] = "2"   # the same dicts, changed in place
    assert c.add_pod(changed) and free(c, "n3") == 0


def test_pod_key():
    assert pod_key({"metadata": {"name": "x", "namespace": "ns"}}) == "ns/x"
    assert pod_key({"metadata": {"name": "x"}}) == "default/x"


def test_reservations_are_held_and_released():
    c = cluster()
    c.add_pod(pod("a", "n1", gpus=2))
    request = c.resources.vector({GPU: 4, "pods": 1})
    c.reserve("plan-1/worker-0", 0, request)
    assert free(c, "n1") == 2 and int(c.capacity.reserved[0, c.resources.column[GPU]]) == 4
    c.reserve("plan-1/worker-0", 1, [0, 0, 1, 4])            # moved to n2, as a plain list
    assert free(c, "n1") == 6 and free(c, "n2") == 4
    c.release("plan-1/worker-0")
    c.release("plan-1/worker-0")                             # twice is harmless
    assert free(c, "n2") == 8 and not c.capacity.reserved.any()


def test_free_is_allocatable_minus_pods_minus_reservations():
    c = cluster()
    for i, (node, gpus) in enumerate([("n1", 1), ("n1", 2), ("n2", 3), ("n3", 4)]):
        c.add_pod(pod(f"p{i}", node, gpus=gpus))
    c.reserve("r", 2, c.resources.vector({GPU: 1}))
    c.remove_pod("ml/p1")
    gpu = c.resources.column[GPU]
    assert c.free[:, gpu].tolist() == [7, 5, -1]              # overcommitted nodes go negative
    assert np.array_equal(c.free, c.capacity.allocatable - c.capacity.used - c.capacity.reserved)


def test_snapshot_is_a_private_copy():
    c = cluster()
    snapshot = c.capacity.snapshot()
    snapshot[0, :] = 0
    c.add_pod(pod("a", "n2", gpus=8))
    assert free(c, "n1") == 8 and int(snapshot[1, c.resources.column[GPU]]) == 8


def test_apart_nodes_are_those_of_other_gangs_pods_kept_apart():
    c = cluster()
    c.add_pod(pod("a", "n1", gpus=2))                        # an unrelated pod: not kept apart
    c.add_pod(pod("b", "n2", gpus=1))
    c.apart["ml/b"] = "ml/lws-0"
    c.reserve("r", c.node_index["n3"], c.resources.vector({GPU: 3}), apart="ml/lws-1")
    assert c.apart_nodes("ml/other").tolist() == [False, True, True]
    assert c.apart_nodes("ml/lws-1").tolist() == [False, True, False]     # its own reservation does not count
    c.release("r")
    c.remove_pod("ml/b")
    assert c.apart == {} and not c.apart_nodes("ml/other").any()


def test_update_node_status_in_place():
    c = cluster()
    rules = PodPlacementRules()
    assert c.usable(rules).tolist() == [True, True, True]
    assert c.update_node_status(node_info("n2", rack="r2", ready=False))
    assert c.usable(rules).tolist() == [True, False, True]
    taint = {"key": "maintenance", "effect": "NoSchedule"}
    assert c.update_node_status(node_info("n2", rack="r2", taints=(taint,)))
    assert c.usable(rules).tolist() == [True, False, True]
    assert c.usable(PodPlacementRules(tolerations=({"operator": "Exists"},))).tolist() == [True, True, True]
    assert c.update_node_status(node_info("n2", rack="r2"))
    assert c.usable(rules).tolist() == [True, True, True]
    assert c.nodes[1].taints == ()


def test_update_node_status_refuses_label_or_capacity_changes():
    c = cluster()
    assert not c.update_node_status(node_info("n2", rack="r7"))
    assert not c.update_node_status(node_info("n2", rack="r2", gpus=4))
    assert not c.update_node_status(node_info("unknown"))
    assert c.nodes[1].labels == {"rack": "r2"}


def test_from_objects_loads_a_dump():
    text = """
kind: List
items:
- kind: Node
  metadata: {name: n1, labels: {rack: r1}}
  status: {allocatable: {cpu: "4", memory: 16Gi, pods: "10"}}
- kind: Pod
  metadata: {name: web, namespace: shop}
  spec: {nodeName: n1, containers: [{name: c, resources: {requests: {cpu: 500m, memory: 1Gi}}}]}
  status: {phase: Running}
- apiVersion: kueue.x-k8s.io/v1beta2
  kind: Topology
  metadata: {name: racks}
  spec: {levels: [{nodeLabel: rack}]}
"""
    c = Cluster.from_objects(ClusterObjects.from_text(text))
    assert c.resources.as_dict(c.free[0]) == {"cpu": 3500, "memory": 15 * GI, "pods": 9}
    assert list(c.topologies) == ["racks"]


def test_a_pod_with_a_bad_quantity_names_the_pod():
    c = cluster()
    with pytest.raises(ValueError, match="Pod ml/bad: .*'lots'"):
        c.add_pod(pod("bad", "n1", cpu="lots"))
    assert np.array_equal(c.free, c.capacity.allocatable)


def test_the_demo_cluster(demo_cluster):
    c = demo_cluster
    assert len(c.nodes) == 36 and sorted(c.topologies) == ["default", "kueue-default"]
    assert c.topology_errors == {}
    unusable = [c.node_names[i] for i in np.flatnonzero(~c.usable(PodPlacementRules()))]
    assert unusable == ["node-16", "node-24"]                     # NotReady, tainted
    tree = c.topology("default")
    assert [tree.domain_count(level) for level in range(tree.depth)] == [2, 5, 9, 36]
    gpu = c.resources.column[GPU]
    # 7 device-plugin pods hold 36 GPUs; on the DRA rack a claim holds 4 and a MIG instance a whole GPU
    assert int(c.free[:, gpu].sum()) == 288 - 36 - 4 - 1


def test_the_demo_cluster_has_a_rack_of_dra_gpus(demo_cluster):
    c = demo_cluster
    dra = [f"node-{i}" for i in (33, 34, 35, 36)]
    assert all(GPU not in c.nodes[c.node_index[n]].allocatable for n in dra)     # the driver's, not the plugin's
    assert {c.topology("default").node_path(c.node_index[n])[2] for n in dra} == {"b-block-3-rack-1"}
    gpu, mig = c.resources.column[GPU], c.resources.column["mig.nvidia.com"]
    rows = [c.node_index[n] for n in dra]
    assert c.capacity.allocatable[rows, gpu].tolist() == [8, 8, 8, 8]
    assert c.free[rows, gpu].tolist() == [4, 8, 7, 8]               # 4 in a claim; one MIG instance of gpu-0
    assert c.capacity.allocatable[rows, mig].tolist() == [0, 0, 16, 0]
    assert c.free[rows, mig].tolist() == [0, 0, 15, 0]              # the other half of gpu-0 is still free
    assert c.devices.errors == {} and c.devices.problems == []
