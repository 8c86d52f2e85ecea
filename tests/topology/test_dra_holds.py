"""A reservation and the claims kube-scheduler allocates for its pod before binding it (topology/cluster.py
hold_for): the devices are counted once, by the claim, from the allocation until the pod is bound."""
import copy

from topology.cluster import Cluster
from topology.demo import DRA_GPU_CLASS, GPU, _node, _pod, dra_claim, dra_node, dra_slice
from topology.objects import ClusterObjects


def cluster_of(*objects):
    return Cluster.from_objects(ClusterObjects.from_objects(copy.deepcopy(list(objects))))


def dra_cluster(*objects):
    return cluster_of(dra_node(_node(1, "zone-a", "block-1", "rack-1")), dra_slice("node-01"), DRA_GPU_CLASS, *objects)


def free(cluster, resource=GPU, node="node-01"):
    return int(cluster.capacity.free[cluster.node_index[node], cluster.resources.column[resource]])


def four_gpus(cluster):
    return cluster.resources.vector({"cpu": 1000, GPU: 4})


def allocated_for(pod, devices, name=None):
    """The claim kube-scheduler writes in PreBind: allocated on node-01 and reserved for `pod`."""
    claim = dra_claim(name or f"{pod}-gpu", "research", "node-01", devices)
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}]
    return claim


def two_held_slots(cluster):
    cluster.reserve("gang:research/g#w-0", 0, four_gpus(cluster), pod="research/p0")
    cluster.reserve("gang:research/g#w-1", 0, four_gpus(cluster), pod="research/p1")


def test_the_claim_allocated_for_a_reserved_pod_holds_its_devices_once():
    cluster = dra_cluster()
    two_held_slots(cluster)
    assert free(cluster) == 0
    request = four_gpus(cluster)
    assert cluster.holding(0, request, "research/p0") is request
    freed = cluster.claim_changed(None, allocated_for("p0", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]))
    assert free(cluster) == 0                       # was -4: the slot's hold and the claim both
    assert cluster.holding(0, request, "research/p0")[cluster.resources.column[GPU]] == 0   # what must be free
    assert cluster.holding(0, request, "research/p1") is request
    assert free(cluster, "cpu") == cluster.capacity.allocatable[0, cluster.resources.column["cpu"]] - 2000
    assert freed == []
    cluster.claim_changed(None, allocated_for("p1", ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]))
    assert free(cluster) == 0 and free(cluster, "gpu.nvidia.com") == 0
    # the pod is bound: its slot's hold goes, its bound usage counts no device (its claim does)
    cluster.release("gang:research/g#w-0")
    pod = _pod("p0", "node-01", 4)
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    cluster.add_pod(pod)
    assert free(cluster) == 0


def test_a_hold_taken_again_on_a_rebuilt_model_counts_the_claim_once():
    claim = allocated_for("p0", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"])
    cluster = dra_cluster(claim)
    two_held_slots(cluster)
    assert free(cluster) == 0


def test_a_claim_of_another_pod_or_not_yet_allocated_changes_no_hold():
    cluster = dra_cluster()
    two_held_slots(cluster)
    cluster.claim_changed(None, allocated_for("someone-else", ["gpu-0"]))
    assert free(cluster) == -1                      # a device taken from under the plan: overbooked, as it is
    pending = allocated_for("p0", [])
    pending["status"].pop("allocation")
    cluster.claim_changed(None, pending)
    assert free(cluster) == -1


def test_a_deallocated_claim_gives_the_devices_back_to_the_hold():
    """kube-scheduler's Unreserve after a failed bind deallocates the claim: the slot holds them again."""
    cluster = dra_cluster()
    two_held_slots(cluster)
    claim = allocated_for("p0", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"])
    cluster.claim_changed(None, claim)
    cluster.claim_changed(claim, None)
    assert free(cluster) == 0
    assert cluster.reservations["gang:research/g#w-0"].request[cluster.resources.column[GPU]] == 4


def test_the_pod_taking_an_already_reserved_slot_is_told_after_the_reservation():
    cluster = dra_cluster()
    cluster.reserve("gang:research/g#w-0", 0, four_gpus(cluster))
    cluster.reserve("gang:research/g#w-1", 0, four_gpus(cluster))
    cluster.claim_changed(None, allocated_for("p0", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]))
    assert free(cluster) == -4                      # no pod named: nothing says the claim is the slot's
    cluster.hold_for("gang:research/g#w-0", "research/p0")
    assert free(cluster) == 0
    cluster.hold_for("gang:research/g#w-0", None)   # its pod was deleted before binding
    assert free(cluster) == -4
    cluster.hold_for("gang:research/g#w-0", "research/p0")
    cluster.release("gang:research/g#w-0")
    assert free(cluster) == 0 and not cluster.holders
