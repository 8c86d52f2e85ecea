"""Counting GPUs published through DRA as columns of the node x resource matrices (topology/dra.py)."""
import copy

from topology.cluster import Cluster
from topology.demo import (DRA_GPU_CLASS, DRA_MIG_CLASS, GPU, _node, _pod, dra_claim, dra_node,
                           dra_slice)
from topology.objects import ClusterObjects


def cluster_of(*objects):
    return Cluster.from_objects(ClusterObjects.from_objects(copy.deepcopy(list(objects))))


def free(cluster, node, resource):
    return int(cluster.capacity.free[cluster.node_index[node], cluster.resources.column[resource]])


def total(cluster, node, resource):
    return int(cluster.capacity.allocatable[cluster.node_index[node], cluster.resources.column[resource]])


def dra(index):
    return dra_node(_node(index, "zone-a", "block-1", "rack-1"))


def test_extended_resource_from_dra_devices_on_a_node_without_it_in_allocatable():
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS)
    assert total(cluster, "node-01", GPU) == 8
    assert total(cluster, "node-01", "gpu.nvidia.com") == 8


def test_device_plugin_node_keeps_its_count_in_a_mixed_cluster():
    plugin = _node(2, "zone-a", "block-1", "rack-1")
    plugin["status"]["allocatable"][GPU] = "4"
    cluster = cluster_of(dra(1), plugin, dra_slice("node-01"), dra_slice("node-02", gpus=8), DRA_GPU_CLASS)
    assert total(cluster, "node-01", GPU) == 8
    assert total(cluster, "node-02", GPU) == 4          # the device plugin's, not the slice's


def test_no_device_class_no_column():
    cluster = cluster_of(dra(1), dra_slice("node-01"))
    assert GPU not in cluster.resources.column


def test_allocated_claim_uses_its_devices_once_and_a_bound_pod_is_not_counted_again():
    pod = _pod("p", "node-01", 2)
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, pod,
                         dra_claim("p-gpu", "research", "node-01", ["gpu-0", "gpu-1"]))
    assert free(cluster, "node-01", GPU) == 6


def test_only_the_newest_pool_generation_counts():
    cluster = cluster_of(dra(1), dra_slice("node-01", gpus=8, generation=1) | {"metadata": {"name": "old"}},
                         dra_slice("node-01", gpus=4, generation=2), DRA_GPU_CLASS)
    assert total(cluster, "node-01", GPU) == 4


def test_one_allocated_mig_instance_makes_its_whole_gpu_not_free():
    cluster = cluster_of(dra(1), dra_slice("node-01", mig=True), DRA_GPU_CLASS, DRA_MIG_CLASS,
                         dra_claim("m", "ns", "node-01", ["gpu-3-mig-1g10gb-2"]))
    assert (total(cluster, "node-01", GPU), free(cluster, "node-01", GPU)) == (8, 7)
    assert (total(cluster, "node-01", "mig.nvidia.com"), free(cluster, "node-01", "mig.nvidia.com")) == (56, 55)


def test_an_allocated_full_gpu_takes_all_its_mig_instances():
    cluster = cluster_of(dra(1), dra_slice("node-01", mig=True), DRA_GPU_CLASS, DRA_MIG_CLASS,
                         dra_claim("g", "ns", "node-01", ["gpu-0"]))
    assert free(cluster, "node-01", "mig.nvidia.com") == 49


def test_class_selectors_filter_devices_by_cel():
    h100 = copy.deepcopy(DRA_GPU_CLASS)
    h100["metadata"]["name"] = "big-gpus"
    h100["spec"] = {"selectors": [{"cel": {"expression":
                    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0 && "
                    "device.attributes['gpu.nvidia.com'].index < 2 && "
                    "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))"}}]}
    cluster = cluster_of(dra(1), dra_slice("node-01"), h100)
    assert total(cluster, "node-01", "big-gpus") == 2


def test_a_class_whose_cel_fails_is_skipped_with_its_error_and_others_count():
    broken = copy.deepcopy(DRA_GPU_CLASS)
    broken["metadata"]["name"] = "broken"
    broken["spec"]["selectors"] = [{"cel": {"expression": "device.driver =="}}]
    failing = copy.deepcopy(DRA_GPU_CLASS)
    failing["metadata"]["name"] = "failing"
    failing["spec"]["selectors"] = [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].nope == 1"}}]
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, broken, failing)
    assert total(cluster, "node-01", GPU) == 8
    assert "broken" not in cluster.resources.column and "failing" not in cluster.resources.column
    assert "does not compile" in cluster.devices.errors["broken"]
    assert "nope" in cluster.devices.errors["failing"]


def test_slice_with_node_selector_applies_to_the_nodes_it_selects():
    shared = dra_slice("node-01")
    del shared["spec"]["nodeName"]
    shared["spec"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-02"]}]}]}
    cluster = cluster_of(dra(1), dra(2), shared, DRA_GPU_CLASS)
    assert GPU not in cluster.nodes[0].allocatable
    assert (total(cluster, "node-01", GPU), total(cluster, "node-02", GPU)) == (0, 8)


def test_claim_events_change_only_the_claims_nodes():
    cluster = cluster_of(dra(1), dra(2), dra_slice("node-01"), dra_slice("node-02"), DRA_GPU_CLASS)
    claim = dra_claim("c", "ns", "node-02", ["gpu-0", "gpu-1", "gpu-2"])
    touched = cluster.devices.apply_claim(None, claim)
    cluster.claims_changed([cluster.node_index[n] for n in touched])
    assert (free(cluster, "node-01", GPU), free(cluster, "node-02", GPU)) == (8, 5)
    cluster.claims_changed([cluster.node_index[n] for n in cluster.devices.apply_claim(claim, None)])
    assert free(cluster, "node-02", GPU) == 8
