"""What evicting a pod frees when its GPUs are DRA devices (topology/cluster.py `eviction_usage`), and which
pending pods kube-scheduler's DynamicResources plugin decides for (`asks_devices`). Issue 38 items 3 and 4."""
import copy

import numpy as np

from topology.cluster import Cluster
from topology.demo import DRA_GPU_CLASS, DRA_MIG_CLASS, GPU, _node, _pod, dra_claim, dra_node, dra_slice
from topology.objects import ClusterObjects


def cluster_of(*objects):
    return Cluster.from_objects(ClusterObjects.from_objects(copy.deepcopy(list(objects))))


def dra(index):
    return dra_node(_node(index, "zone-a", "block-1", "rack-1"))


def held(claim: dict, *pods: str) -> dict:
    """The claim as kube-scheduler leaves it once it reserved it for `pods` (status.reservedFor)."""
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": p, "uid": f"demo-{p}"} for p in pods]
    return claim


def freed(cluster, key, resource, together=()):
    return int(cluster.eviction_usage(key, together)[cluster.resources.column[resource]])


def test_evicting_a_pod_frees_the_devices_of_the_claim_it_alone_holds():
    """A bound pod's DRA columns are zero in its usage (its devices are its claim's): before eviction_usage
    the victim search saw no GPU freed by evicting it."""
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, _pod("p", "node-01", 8),
                         held(dra_claim("p-gpu", "research", "node-01", [f"gpu-{i}" for i in range(8)]), "p"))
    assert int(cluster.free[0, cluster.resources.column[GPU]]) == 0
    assert cluster.pods["research/p"].request[cluster.resources.column[GPU]] == 0
    assert freed(cluster, "research/p", GPU) == 8
    assert freed(cluster, "research/p", "gpu.nvidia.com") == 8
    assert freed(cluster, "research/p", "cpu") == 8000
    assert int(cluster.free[0, cluster.resources.column[GPU]]) == 0      # a what-if: nothing is changed


def test_a_claim_shared_by_two_pods_frees_only_when_both_go_and_counts_once():
    claim = held(dra_claim("shared", "research", "node-01", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]), "a", "b")
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, _pod("a", "node-01", 0),
                         _pod("b", "node-01", 0), claim)
    assert freed(cluster, "research/a", GPU) == 0 and freed(cluster, "research/b", GPU) == 0
    both = {"research/a", "research/b"}
    assert freed(cluster, "research/a", GPU, both) + freed(cluster, "research/b", GPU, both) == 4
    assert cluster.claim_holders() == {"research/a": frozenset(both), "research/b": frozenset(both)}


def test_a_claim_held_by_a_pod_no_longer_bound_frees_with_its_last_bound_holder():
    claim = held(dra_claim("shared", "research", "node-01", ["gpu-0", "gpu-1"]), "a", "gone")
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, _pod("a", "node-01", 0), claim)
    assert freed(cluster, "research/a", GPU) == 2


def test_a_claim_reserved_for_something_other_than_a_pod_is_never_freed_by_an_eviction():
    claim = held(dra_claim("c", "research", "node-01", ["gpu-0"]), "a")
    claim["status"]["reservedFor"].append({"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g",
                                           "uid": "u"})
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, _pod("a", "node-01", 0), claim)
    assert freed(cluster, "research/a", GPU) == 0


def test_freeing_one_mig_instance_gives_back_its_whole_gpu():
    """Partitionable devices: the pod's one 1g.10gb instance keeps all of GPU 3 from being free; evicting it
    frees that full GPU and the instance (counted by the node's counters, not device by device)."""
    claim = held(dra_claim("m", "research", "node-01", ["gpu-3-mig-1g10gb-2"]), "p")
    cluster = cluster_of(dra(1), dra_slice("node-01", mig=True), DRA_GPU_CLASS, DRA_MIG_CLASS,
                         _pod("p", "node-01", 0), claim)
    assert freed(cluster, "research/p", GPU) == 1
    assert freed(cluster, "research/p", "mig.nvidia.com") == 1


def test_a_claim_event_is_what_frees_the_devices_in_the_model():
    """The eviction itself (the pod leaving) gives back its cpu, not its devices: they are free once its
    claim is deallocated."""
    claim = held(dra_claim("p-gpu", "research", "node-01", [f"gpu-{i}" for i in range(8)]), "p")
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, _pod("p", "node-01", 8), claim)
    column = cluster.resources.column[GPU]
    cluster.remove_pod("research/p")
    assert int(cluster.free[0, column]) == 0
    cluster.claims_changed([cluster.node_index[n] for n in cluster.devices.apply_claim(claim, None)])
    assert int(cluster.free[0, column]) == 8


def test_a_pod_without_devices_frees_its_request():
    plugin = _node(2, "zone-a", "block-1", "rack-1")
    cluster = cluster_of(plugin, DRA_GPU_CLASS, _pod("p", "node-02", 8))
    assert np.array_equal(cluster.eviction_usage("research/p"), cluster.pods["research/p"].request)


def test_a_gpu_pod_counts_as_asking_devices_only_where_some_node_serves_its_gpus_by_dra():
    """With a DeviceClass serving nvidia.com/gpu on a device-plugin cluster, a pod asking nvidia.com/gpu is
    decided by NodeResourcesFit, not DynamicResources."""
    plugin = _node(2, "zone-a", "block-1", "rack-1")
    spec = _pod("p", "", 8)["spec"]
    assert not cluster_of(plugin, DRA_GPU_CLASS).asks_devices(spec, "research")
    assert not cluster_of(plugin, dra(1), DRA_GPU_CLASS).asks_devices(spec, "research")   # no slice on node-01
    assert cluster_of(plugin, dra(1), dra_slice("node-01"), DRA_GPU_CLASS).asks_devices(spec, "research")
    cpu_only = _pod("q", "", 0)["spec"]
    assert not cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS).asks_devices(cpu_only, "research")
    cpu_only["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "eight"}]
    assert cluster_of(plugin, DRA_GPU_CLASS).asks_devices(cpu_only, "research")


def test_what_an_eviction_frees_follows_claim_events():
    """The holders are read again after each claim event: a second holder added to the claim keeps its
    devices when the first pod goes alone; a deallocated claim frees nothing on eviction any more."""
    claim = held(dra_claim("c", "research", "node-01", ["gpu-0", "gpu-1"]), "a")
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, _pod("a", "node-01", 0),
                         _pod("b", "node-01", 0), claim)
    assert freed(cluster, "research/a", GPU) == 2

    def event(before, after):
        cluster.claims_changed([cluster.node_index[n] for n in cluster.devices.apply_claim(before, after)])

    shared = held(copy.deepcopy(cluster.devices.claims["research/c"]), "a", "b")
    event(cluster.devices.claims["research/c"], shared)
    assert freed(cluster, "research/a", GPU) == 0
    assert freed(cluster, "research/a", GPU, {"research/b"}) == 2
    released = copy.deepcopy(shared)
    del released["status"]["allocation"]
    event(shared, released)
    assert freed(cluster, "research/a", GPU, {"research/b"}) == 0
    assert cluster.claim_holders() == {}
    event(released, None)
    assert cluster.claim_holders() == {}
