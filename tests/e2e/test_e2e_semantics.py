"""Real-cluster semantics on the real control plane (issue 13 items 4 and 7): a LeaderWorkerSet as its
controller numbers it, and a pod of another scheduler landing on a node reserved for a gang."""
from __future__ import annotations

from workloads import (BLOCK, ELSEWHERE, GPU, RACK, THREE_RACKS, assert_no_node_over, container, distinct,
                       gated_gang, indexed_job, plan_slots, release, topology)


def test_pod_of_the_default_scheduler_on_a_reserved_node_makes_the_gang_replan(cluster, ns):
    """Half the gang is bound; the default scheduler (which knows nothing of reservations) binds a pod
    of 8 GPUs onto a node planned for the held half: those slots move inside the block, nothing is over
    capacity and the gang completes."""
    ns.add_nodes({**THREE_RACKS, **ELSEWHERE})
    held = gated_gang(cluster, ns, "taken", range(4, 8))
    cluster.wait_bound(ns.name, 4)
    target = plan_slots(cluster, ns.name)["worker-6"]
    ns.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "intruder"},
              "spec": {"schedulerName": "default-scheduler",
                       "nodeSelector": {"kubernetes.io/hostname": target},
                       "containers": [container(gpus=8)]}})
    cluster.wait_bound(ns.name, 1, "!training.kubeflow.org/replica-type")
    release(cluster, ns, held)
    bound = cluster.wait_bound(ns.name, 9, timeout=90)
    gang = [p for p in bound if p.metadata.name != "intruder"]
    assert target not in {p.spec.node_name for p in gang}
    assert len(distinct(cluster, gang, BLOCK)) == 1
    assert len(distinct(cluster, [p for p in gang if p.metadata.name in held], RACK)) == 1
    assert_no_node_over(cluster, 8)


def test_lws_subgroups_land_as_upstream_numbers_them_one_rack_each(cluster, ns):
    """No leaderTemplate (the leader uses the worker template), size 4, subGroupSize 2: upstream puts the
    leader with worker 1 in subgroup 0 and workers 2-3 in subgroup 1; with subgroup-exclusive-topology on
    racks each subgroup lands on a rack of its own (racks of two 8-GPU nodes)."""
    ns.add_nodes({f"{r}{n}": ("zone-a", "block-a", f"rack-{r}") for r in "pqr" for n in range(2)})
    worker = {"spec": {"schedulerName": "tas-scheduler", "containers": [container(gpus=8)]}}
    cluster.create_with_pods(ns.name, {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "infer", "annotations": {
            "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": RACK}},
        "spec": {"replicas": 1, "leaderWorkerTemplate": {
            "size": 4, "subGroupPolicy": {"subGroupSize": 2}, "workerTemplate": worker}}})
    bound = cluster.wait_bound(ns.name, 4, "leaderworkerset.sigs.k8s.io/name=infer")
    by_index = {int(p.metadata.labels["leaderworkerset.sigs.k8s.io/worker-index"]): p for p in bound}
    racks = [distinct(cluster, [by_index[i] for i in subgroup], RACK) for subgroup in ([0, 1], [2, 3])]
    assert all(len(r) == 1 for r in racks), racks
    assert racks[0] != racks[1], "each subgroup takes its rack alone"
    assert all(int(c.resources.limits[GPU]) == 8 for p in bound for c in p.spec.containers)


def test_a_lws_scaled_down_gives_the_nodes_of_its_removed_group_to_the_next_gang_at_once(cluster, ns):
    """Two groups of 4 in one rack scaled to one group: the LWS controller deletes the second group's pods
    and makes no replacements. Its plan goes with the spec change (a new metadata.generation) instead of
    holding the group's nodes for replacements until the reservation TTL (300 s)."""
    ns.add_nodes({f"n{i}": ("zone-a", "block-a", "rack-a") for i in range(8)})
    worker = {"spec": {"schedulerName": "tas-scheduler", "containers": [container(gpus=8)]}}
    cluster.create_with_pods(ns.name, {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve", "annotations": topology(required="rack")},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4, "workerTemplate": worker}}})
    cluster.wait_bound(ns.name, 8, "leaderworkerset.sigs.k8s.io/name=serve")
    cluster.plane.kubectl("-n", ns.name, "patch", "leaderworkerset", "serve", "--type=merge",
                          "-p", '{"spec":{"replicas":1}}')
    cluster.core.delete_collection_namespaced_pod(                  # what the LWS controller then deletes
        ns.name, label_selector="leaderworkerset.sigs.k8s.io/name=serve,leaderworkerset.sigs.k8s.io/group-index=1")
    ns.apply(indexed_job("next", 4, 8, topology(required="rack")))
    bound = cluster.wait_bound(ns.name, 4, "job-name=next", timeout=45)
    assert len(distinct(cluster, bound, RACK)) == 1
