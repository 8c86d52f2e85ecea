"""The counting rules of topology/dra_requests.py: one pool of devices behind a class and the extended
resource it serves, a request's own selectors, claim constraints with matchAttribute."""
import copy

import numpy as np

from topology.cluster import Cluster
from topology.demo import DRA_GPU_CLASS, GPU, _node, dra_claim, dra_node, dra_slice
from topology.groups import Group, GroupTree, RoleSpec, Slot
from topology.objects import ClusterObjects
from topology.planner import plan_for

CLASS = "gpu.nvidia.com"


def cluster_of(*objects):
    return Cluster.from_objects(ClusterObjects.from_objects(copy.deepcopy(list(objects))))


def free(cluster, node, resource):
    return int(cluster.capacity.free[cluster.node_index[node], cluster.resources.column[resource]])


def dra(index, rack="rack-1"):
    return dra_node(_node(index, "zone-a", "block-1", rack))


def template(name, *requests, constraints=(), namespace="research"):
    devices = {"requests": [{"name": f"r{i}", **r} for i, r in enumerate(requests)]}
    if constraints:
        devices["constraints"] = list(constraints)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": {"devices": devices}}}


def claiming(*templates):
    return {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}],
            "resourceClaims": [{"name": f"c{i}", "resourceClaimTemplateName": t} for i, t in enumerate(templates)]}


def extended(gpus):
    return {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1", GPU: str(gpus)},
                                                          "limits": {GPU: str(gpus)}}}]}


def exactly(count, *selectors, device_class=CLASS):
    body = {"deviceClassName": device_class, "count": count}
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"exactly": body}


def request_row(cluster, spec):
    return cluster.resources.vector(cluster.pod_demand(spec, "research"))


def gang_of(roles, rack=None):
    """A gang of roles {name: (pods, spec)}, one group per role (in a rack when `rack`)."""
    children = [Group(f"g/{role}", slots=[Slot(role, i) for i in range(pods)]) for role, (pods, _) in roles.items()]
    return GroupTree("research", "g", "Job", Group("g", children=children, required_level=rack),
                     {role: RoleSpec(role, pods, spec) for role, (pods, spec) in roles.items()},
                     topology="default" if rack else None)


# --- 1. one pool of devices, not two ----------------------------------------------------------------------

def test_reserving_class_devices_lowers_the_extended_resource_they_serve_and_back():
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, template("t8", exactly(8)))
    node = cluster.node_index["node-01"]
    cluster.reserve("a", node, request_row(cluster, claiming("t8")))
    assert (free(cluster, "node-01", CLASS), free(cluster, "node-01", GPU)) == (0, 0)
    cluster.release("a")
    cluster.reserve_many(["b"], np.array([node]), request_row(cluster, extended(3))[None, :])
    assert (free(cluster, "node-01", CLASS), free(cluster, "node-01", GPU)) == (5, 5)
    cluster.release("b")
    assert (free(cluster, "node-01", CLASS), free(cluster, "node-01", GPU)) == (8, 8)


def test_a_device_plugin_node_keeps_its_extended_resource_apart_from_its_dra_devices():
    plugin = _node(2, "zone-a", "block-1", "rack-1")            # 8 nvidia.com/gpu from the device plugin
    cluster = cluster_of(plugin, dra_slice("node-02"), DRA_GPU_CLASS, template("t8", exactly(8)))
    cluster.reserve("a", cluster.node_index["node-02"], request_row(cluster, claiming("t8")))
    assert (free(cluster, "node-02", CLASS), free(cluster, "node-02", GPU)) == (0, 8)


def test_a_plan_does_not_put_a_claim_gang_and_an_extended_resource_gang_on_the_same_devices():
    cluster = cluster_of(dra(1), dra(2), dra_slice("node-01"), dra_slice("node-02"), DRA_GPU_CLASS,
                         template("t8", exactly(8)))
    plan = plan_for(cluster, gang_of({"claims": (1, claiming("t8")), "plugin": (1, extended(8))}))
    assert plan.placed
    assert sorted(plan.slots.values()) == [0, 1]                 # one node each, not both on one
    cluster.reserve("claims", 0, request_row(cluster, claiming("t8")))
    plan = plan_for(cluster, gang_of({"plugin": (1, extended(8))}))
    assert plan.placed and list(plan.slots.values()) == [1]


def test_an_allocated_claim_lowers_both_columns():
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS,
                         dra_claim("c", "research", "node-01", ["gpu-0", "gpu-1"]))
    assert (free(cluster, "node-01", CLASS), free(cluster, "node-01", GPU)) == (6, 6)
