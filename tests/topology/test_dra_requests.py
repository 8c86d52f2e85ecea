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


# --- 2. a request's own selectors ---------------------------------------------------------------------------

FIRST_TWO = "device.attributes['gpu.nvidia.com'].index < 2"


def test_a_request_with_selectors_counts_only_matching_devices():
    cluster = cluster_of(dra(1), dra(2), dra_slice("node-01"), dra_slice("node-02"), DRA_GPU_CLASS,
                         template("two", exactly(2, FIRST_TWO)))
    demand = cluster.pod_demand(claiming("two"), "research")
    column = f"{CLASS}[{FIRST_TWO}]"
    assert demand[CLASS] == 2 and demand[column] == 2
    assert free(cluster, "node-01", column) == 2
    plan = plan_for(cluster, gang_of({"w": (2, claiming("two"))}))
    assert plan.placed and sorted(plan.slots.values()) == [0, 1]        # 8 GPUs a node, but 2 that match


def test_an_allocated_matching_device_is_not_free_for_the_selector_column():
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, template("two", exactly(2, FIRST_TWO)),
                         dra_claim("c", "research", "node-01", ["gpu-1"]))
    assert free(cluster, "node-01", f"{CLASS}[{FIRST_TWO}]") == 1
    assert free(cluster, "node-01", CLASS) == 7


def test_selectors_no_device_satisfies_refuse_naming_claim_request_and_class():
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, template("three", exactly(3, FIRST_TWO)))
    plan = plan_for(cluster, gang_of({"w": (1, claiming("three"))}))
    assert not plan.placed and plan.details["never_fits"]
    assert ("claim c0 (ResourceClaimTemplate three) request r0 asks 3 of DeviceClass gpu.nvidia.com: no node has 3 "
            "devices of the class matching the request's selectors (at most 2)") in plan.reason


def test_first_available_and_v1beta1_request_selectors_count_too():
    alternative = {"firstAvailable": [{"name": "a", "deviceClassName": CLASS, "count": 1,
                                       "selectors": [{"cel": {"expression": FIRST_TWO}}]}]}
    beta = {"deviceClassName": CLASS, "count": 1, "selectors": [{"cel": {"expression": FIRST_TWO}}]}
    beta_template = template("beta", beta) | {"apiVersion": "resource.k8s.io/v1beta1"}
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, template("alt", alternative), beta_template)
    column = f"{CLASS}[{FIRST_TWO}]"
    assert cluster.pod_demand(claiming("alt"), "research")[column] == 1
    assert cluster.pod_demand(claiming("beta"), "research")[column] == 1
    assert free(cluster, "node-01", column) == 2


def first_available(*alternatives):
    return {"firstAvailable": [{"name": f"a{i}", **a["exactly"]} for i, a in enumerate(alternatives)]}


def test_first_available_counts_the_first_alternative_some_node_serves():
    # kube-scheduler allocates the first alternative that fits: 16 GPUs no node has, then 4 that two can
    either = first_available(exactly(16), exactly(4))
    cluster = cluster_of(dra(1), dra(2), dra_slice("node-01"), dra_slice("node-02"), DRA_GPU_CLASS,
                         template("either", either))
    assert cluster.pod_demand(claiming("either"), "research")[CLASS] == 4
    assert cluster.claim_problems(claiming("either"), "research") == []
    plan = plan_for(cluster, gang_of({"w": (4, claiming("either"))}))
    assert plan.placed and sorted(plan.slots.values()) == [0, 0, 1, 1]


def test_first_available_skips_a_missing_class_and_unmatched_selectors_and_counts_a_later_selector_column():
    none = "device.attributes['gpu.nvidia.com'].index > 100"
    either = first_available(exactly(1, device_class="no.such.class"), exactly(1, none), exactly(2, FIRST_TWO))
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, template("either", either))
    column = f"{CLASS}[{FIRST_TWO}]"
    demand = cluster.pod_demand(claiming("either"), "research")
    assert demand[CLASS] == 2 and demand[column] == 2 and f"{CLASS}[{none}]" not in demand
    assert free(cluster, "node-01", column) == 2                   # every alternative's column is counted
    assert cluster.claim_problems(claiming("either"), "research") == []


def test_first_available_that_no_node_serves_is_refused_naming_its_first_alternative():
    either = first_available(exactly(16), exactly(1, device_class="no.such.class"))
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, template("either", either))
    assert cluster.pod_demand(claiming("either"), "research")[CLASS] == 16
    plan = plan_for(cluster, gang_of({"w": (1, claiming("either"))}))
    assert not plan.placed and plan.details["never_fits"]
    assert ("claim c0 (ResourceClaimTemplate either) request r0 asks 16 of DeviceClass gpu.nvidia.com: no node "
            "has 16 matching devices (at most 8)") in plan.reason


def test_a_request_selector_that_does_not_compile_refuses_the_claim_and_nothing_else():
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, template("bad", exactly(1, "device.(")),
                         template("t8", exactly(8)))
    problems = cluster.claim_problems(claiming("bad"), "research")
    assert len(problems) == 1 and problems[0].startswith(
        "claim c0 (ResourceClaimTemplate bad) request r0 asks 1 of DeviceClass gpu.nvidia.com: its selectors are "
        "skipped (selectors[0].cel.expression does not compile")
    assert cluster.claim_problems(claiming("t8"), "research") == []
    assert free(cluster, "node-01", GPU) == 8


# --- 3. claim constraints with matchAttribute -----------------------------------------------------------------

PCIE = "resource.kubernetes.io/pcieRoot"


def same_root(count):
    return template(f"root{count}", exactly(count), constraints=[{"matchAttribute": PCIE}])


def test_match_attribute_counts_claims_whose_devices_share_one_value():
    # the demo's GPUs 0-3 sit on one PCIe root, 4-7 on another
    cluster = cluster_of(dra(1), dra(2), dra_slice("node-01"), dra_slice("node-02"), DRA_GPU_CLASS, same_root(4),
                         dra_claim("c", "research", "node-01", ["gpu-0", "gpu-4"]))
    column = f"{CLASS}[4 per claim, same {PCIE}]"
    assert cluster.pod_demand(claiming("root4"), "research")[column] == 1
    assert (free(cluster, "node-01", column), free(cluster, "node-02", column)) == (0, 2)
    assert free(cluster, "node-01", CLASS) == 6                   # 6 free GPUs, but 3 and 3 per root
    plan = plan_for(cluster, gang_of({"w": (1, claiming("root4"))}))
    assert plan.placed and list(plan.slots.values()) == [1]


def test_match_attribute_no_node_can_serve_can_never_fit_naming_the_claim():
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, same_root(5))
    plan = plan_for(cluster, gang_of({"w": (1, claiming("root5"))}))
    assert not plan.placed and plan.details["never_fits"]
    assert ("claim c0 (ResourceClaimTemplate root5) constraint matchAttribute resource.kubernetes.io/pcieRoot: no "
            "node has 5 of DeviceClass gpu.nvidia.com sharing one value of resource.kubernetes.io/pcieRoot") in plan.reason


def test_match_attribute_across_requests_of_two_classes():
    nic_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "nic"},
                 "spec": {"selectors": [{"cel": {"expression": "device.driver == 'nic.example.com'"}}]}}
    nics = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "node-01-nic"},
            "spec": {"driver": "nic.example.com", "nodeName": "node-01",
                     "pool": {"name": "node-01-nic", "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "nic-0", "attributes": {PCIE: {"string": "pci0000:00"}}}]}}
    pair = template("pair", exactly(2), exactly(1, device_class="nic"), constraints=[{"matchAttribute": PCIE}])
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, nic_class, nics, pair)
    assert free(cluster, "node-01", f"{CLASS}[2 {CLASS} + 1 nic per claim, same {PCIE}]") == 1


# --- 4. an unallocated claim several pods of a gang name -------------------------------------------------------

def unallocated(name, *requests, namespace="research"):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": f"claim-{name}"},
            "spec": {"devices": {"requests": [{"name": f"r{i}", **r} for i, r in enumerate(requests)]}}}


def naming(claim, cpu="1"):
    return {"containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}],
            "resourceClaims": [{"name": "gpus", "resourceClaimName": claim}]}


def test_a_shared_unallocated_claim_is_counted_once_and_its_pods_share_one_node():
    cluster = cluster_of(dra(1), dra(2), dra_slice("node-01"), dra_slice("node-02"), DRA_GPU_CLASS,
                         unallocated("shared", exactly(8)),
                         dra_claim("c", "research", "node-01", ["gpu-0", "gpu-1"]))
    assert CLASS not in cluster.pod_demand(naming("shared"), "research")       # not 8 per pod
    plan = plan_for(cluster, gang_of({"w": (4, naming("shared"))}))
    assert plan.placed
    assert set(plan.slots.values()) == {1}                      # node-01 has 6 free: the claim goes to node-02
    assert plan.details["claims"] == {"research/shared": "node-02"}


def test_pods_of_two_roles_naming_one_unallocated_claim_share_its_node():
    cluster = cluster_of(dra(1), dra(2), dra(3), dra_slice("node-01"), dra_slice("node-02"), dra_slice("node-03"),
                         DRA_GPU_CLASS, unallocated("shared", exactly(8)),
                         dra_claim("c", "research", "node-01", ["gpu-0"]))
    cluster.reserve("cpu", 2, cluster.resources.vector({"cpu": 90_000}))      # node-03: room for one pod
    plan = plan_for(cluster, gang_of({"a": (1, naming("shared", cpu="4")), "b": (1, naming("shared", cpu="4"))}))
    assert plan.placed and set(plan.slots.values()) == {1}                   # node-02: 8 free and room for both


def test_a_shared_claim_whose_devices_no_node_has_free_is_refused_naming_it_but_may_fit_later():
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, unallocated("shared", exactly(8)),
                         dra_claim("c", "research", "node-01", ["gpu-0"]))
    plan = plan_for(cluster, gang_of({"w": (2, naming("shared"))}))
    assert not plan.placed and not plan.details["never_fits"]
    assert plan.reason == ("claim gpus (ResourceClaim shared) request r0 asks 8 of DeviceClass gpu.nvidia.com, "
                           "for 2 pods that share it: no node has its devices free")


def test_a_shared_claim_no_node_could_ever_serve_can_never_fit():
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, unallocated("big", exactly(9)))
    plan = plan_for(cluster, gang_of({"w": (2, naming("big"))}))
    assert not plan.placed and plan.details["never_fits"]
    assert ("claim gpus (ResourceClaim big) request r0 asks 9 of DeviceClass gpu.nvidia.com: no node has 9 "
            "matching devices (at most 8)") in plan.reason


def test_pods_of_a_shared_claim_that_do_not_fit_on_one_node_are_refused():
    cluster = cluster_of(dra(1), dra(2), dra_slice("node-01"), dra_slice("node-02"), DRA_GPU_CLASS,
                         unallocated("shared", exactly(1)))
    plan = plan_for(cluster, gang_of({"w": (2, naming("shared", cpu="60"))}))   # 96 cpu a node: one pod each
    assert not plan.placed
    assert plan.details["excluded"]["not where its shared claim is allocated"] >= 1


def test_a_missing_named_claim_waits_for_it():
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS)
    plan = plan_for(cluster, gang_of({"w": (1, naming("later"))}))
    assert not plan.placed and not plan.details["never_fits"]
    assert plan.reason == "role w: waits for ResourceClaim research/later of claim gpus, which does not exist"


def test_a_new_unallocated_claim_with_selectors_asks_for_a_new_model():
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS)
    assert cluster.claim_columns_missing(unallocated("s", exactly(2, FIRST_TWO)))
    assert not cluster.claim_columns_missing(unallocated("plain", exactly(2)))


# --- 5. a native PodGroup's resourceClaims (DRAWorkloadResourceClaims) ------------------------------------------

def native_podgroup(name, claims, made=None):
    podgroup = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": "research"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": claims}}
    if made:
        podgroup["status"] = {"resourceClaimStatuses": [{"name": k, "resourceClaimName": v} for k, v in made.items()]}
    return podgroup


def member_pod(name, group, entry):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "research"},
            "spec": {"schedulingGroup": {"podGroupName": group}, "resourceClaims": [entry],
                     "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]}}


def native_tree(podgroup, entry):
    from grouper.native import group_native
    pods = [member_pod(f"p{i}", podgroup["metadata"]["name"], entry) for i in range(2)]
    return group_native(podgroup, pods, {})


def test_a_podgroup_claim_from_a_template_is_the_groups_one_claim_not_one_per_pod():
    entry = {"name": "gpus", "resourceClaimTemplateName": "t8"}
    made = unallocated("pg-gpus-x7k2", exactly(8))
    cluster = cluster_of(dra(1), dra(2), dra_slice("node-01"), dra_slice("node-02"), DRA_GPU_CLASS,
                         template("t8", exactly(8)), made, dra_claim("c", "research", "node-01", ["gpu-0"]))
    tree = native_tree(native_podgroup("pg", [entry], {"gpus": "pg-gpus-x7k2"}), entry)
    spec = tree.pod_spec("pg")
    assert CLASS not in cluster.pod_demand(spec, "research")            # not 8 GPUs per pod from the template
    plan = plan_for(cluster, tree)
    assert plan.placed and set(plan.slots.values()) == {1}           # 8 free only on node-02, both pods there
    assert plan.details["claims"] == {"research/pg-gpus-x7k2": "node-02"}


def test_a_podgroup_claim_not_made_yet_waits_for_it():
    entry = {"name": "gpus", "resourceClaimTemplateName": "t8"}
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, template("t8", exactly(8)))
    plan = plan_for(cluster, native_tree(native_podgroup("pg", [entry]), entry))
    assert not plan.placed and not plan.details["never_fits"]
    assert plan.reason == ("role pg: waits for the ResourceClaim PodGroup research/pg makes from "
                           "ResourceClaimTemplate t8 for claim gpus, which does not exist yet")


def test_a_pod_claim_that_does_not_match_the_podgroups_stays_the_pods_own():
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, template("t8", exactly(8)),
                         template("t1", exactly(1)))
    group_entry = {"name": "gpus", "resourceClaimTemplateName": "t8"}
    own = {"name": "gpus", "resourceClaimTemplateName": "t1"}           # same name, another template
    tree = native_tree(native_podgroup("pg", [group_entry], {"gpus": "made"}), own)
    assert cluster.pod_demand(tree.pod_spec("pg"), "research")[CLASS] == 1


def test_two_classes_serving_one_extended_resource_reserving_one_class_leaves_the_other():
    other = copy.deepcopy(DRA_GPU_CLASS)
    other["metadata"]["name"] = "all-gpus"
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, other, template("t2", exactly(2)))
    cluster.reserve("a", 0, request_row(cluster, claiming("t2")))
    assert (free(cluster, "node-01", CLASS), free(cluster, "node-01", "all-gpus")) == (6, 8)
    cluster.reserve("b", 0, request_row(cluster, extended(1)))      # either class may serve it: both lowered
    assert (free(cluster, "node-01", CLASS), free(cluster, "node-01", "all-gpus")) == (5, 7)


def test_the_exact_packing_of_a_small_domain_counts_a_class_and_its_extended_resource_as_one_pool():
    from topology.planner.layout import layout_for
    from topology.planner.packing import most_inside, packable
    from topology.planner.state import State
    cluster = cluster_of(dra(1), dra(2), dra_slice("node-01"), dra_slice("node-02"), DRA_GPU_CLASS,
                         template("t4", exactly(4)))
    requests = {"claims": request_row(cluster, claiming("t4")), "plugin": request_row(cluster, extended(4))}
    nodes = np.arange(2)
    state = State(layout_for(None, 2), cluster.free, requests, {r: np.ones(2, dtype=bool) for r in requests},
                  links=cluster.links)
    assert packable(state, nodes, ["claims", "plugin"])
    found = most_inside(state, nodes, ["claims", "plugin"], [0, 0], [4, 4])
    assert found is not None
    per_node = [sum(found[node]) for node in range(2)]      # pods on each node, both roles together
    assert max(per_node) <= 2                                  # 8 GPUs a node: two pods of 4, not four


def test_a_request_selector_failing_on_a_device_refuses_its_claims_naming_the_error_not_can_never_fit_silently():
    failing = "device.attributes['gpu.nvidia.com'].noSuchAttribute == 'x'"
    same = template("grouped", exactly(4, failing), constraints=[{"matchAttribute": PCIE}])
    cluster = cluster_of(dra(1), dra_slice("node-01"), DRA_GPU_CLASS, template("plain", exactly(4, failing)), same)
    for name in ("plain", "grouped"):
        problems = cluster.claim_problems(claiming(name), "research")
        assert problems and all("CEL evaluation failed" in p for p in problems), problems
