"""Priorities from PriorityClass objects, DaemonSet pods on every node and low-priority ReplicaSet pods
(issue 12 scenarios 3 and 4): gangs, exclusive LeaderWorkerSets and preemption treat those pods as what
they are."""
from __future__ import annotations

import time

import pytest

from workloads import BLOCK, HIGH, LOW, RACK, container, distinct, indexed_job, topology


def block_gang(name: str, pods: int, priority_class: str) -> dict:
    return indexed_job(name, pods, 8, topology(required="block"), priority_class=priority_class)


TWO_BLOCKS = {f"{b}{n}": ("zone-a", f"block-{b}", f"rack-{b}") for b in "xy" for n in range(4)}


def test_priority_class_gang_preempts_one_low_gang_inside_one_block(cluster, ns, priority_classes):
    """Each block holds a low-priority gang; the high-priority gang (priority only from its class) evicts one
    of them whole and lands in that block; the other block is untouched."""
    ns.add_nodes(TWO_BLOCKS)
    for name in ("low-a", "low-b"):
        ns.apply(block_gang(name, 4, LOW))
        cluster.wait_bound(ns.name, 4, f"job-name={name}")
    before = {p.metadata.name: p.spec.node_name for p in cluster.pods(ns.name) if p.spec.node_name}
    ns.apply(block_gang("urgent", 4, HIGH))
    bound = cluster.wait_bound(ns.name, 4, "job-name=urgent", timeout=90)
    assert bound[0].spec.priority == 1000
    (block,) = distinct(cluster, bound, BLOCK)
    survivors = {p.metadata.name: p.spec.node_name for p in cluster.pods(ns.name, "job-name!=urgent")
                 if p.spec.node_name and not p.metadata.deletion_timestamp}
    evicted = set(before) - set(survivors)
    assert len(evicted) == 4, f"evicted {sorted(evicted)}"
    assert len({name.rsplit("-", 2)[0] for name in evicted}) == 1, "one low gang evicted whole"   # <job>-<index>-<random>
    assert all(survivors[name] == before[name] for name in survivors)
    evicted_blocks = {cluster.core.read_node(before[name]).metadata.labels[BLOCK] for name in evicted}
    assert evicted_blocks == {block}


@pytest.fixture
def busy_cluster(cluster, ns, priority_classes):
    """The two blocks with a device-plugin DaemonSet pod (10m CPU) on every node and 16 low-priority
    ReplicaSet pods of 2 GPUs, spread evenly over the blocks: no block has a free node to spare for a
    4 x 8-GPU gang."""
    ns.add_nodes(TWO_BLOCKS)
    ns.apply(device_plugin(ns.name), filler(ns.name, 16))
    deadline = time.monotonic() + 60
    while len([p for p in cluster.pods(ns.name, "app=device-plugin") if p.spec.node_name]) < len(ns.nodes):
        assert time.monotonic() < deadline, cluster.describe(ns.name)
        time.sleep(0.3)
    cluster.wait_bound(ns.name, 16, "app=filler")
    return ns


def device_plugin(namespace: str) -> dict:
    labels = {"app": "device-plugin"}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "device-plugin"},
            "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "tolerations": [{"operator": "Exists"}],
                "nodeSelector": {"e2e.example.com/test": namespace},
                "containers": [container(cpu="10m")]}}}}


def filler(namespace: str, replicas: int) -> dict:
    labels = {"app": "filler"}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "filler"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "schedulerName": "tas-scheduler", "priorityClassName": LOW,
                         "nodeSelector": {"e2e.example.com/test": namespace},
                         "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": BLOCK,
                                                        "whenUnsatisfiable": "DoNotSchedule",
                                                        "labelSelector": {"matchLabels": labels}}],
                         "containers": [container(gpus=2)]}}}}


def test_gang_lands_beside_daemonset_and_low_priority_pods(cluster, busy_cluster):
    """A 2 x 4-GPU gang needing one rack fits in what the ReplicaSet left: DaemonSet pods take no GPU."""
    ns = busy_cluster
    ns.apply(indexed_job("small", 2, 4, topology(required="rack")))
    bound = cluster.wait_bound(ns.name, 2, "job-name=small")
    assert len(distinct(cluster, bound, RACK)) == 1
    assert len([p for p in cluster.pods(ns.name, "app=filler") if p.spec.node_name]) == 16


def test_preemption_evicts_replicaset_pods_of_one_block_only_never_daemonset_pods(cluster, busy_cluster):
    ns = busy_cluster
    daemons = {p.metadata.uid for p in cluster.pods(ns.name, "app=device-plugin")}
    fillers = {p.metadata.uid: p.spec.node_name for p in cluster.pods(ns.name, "app=filler")}
    ns.apply(block_gang("urgent", 4, HIGH))
    bound = cluster.wait_bound(ns.name, 4, "job-name=urgent", timeout=90)
    (block,) = distinct(cluster, bound, BLOCK)
    assert {p.metadata.uid for p in cluster.pods(ns.name, "app=device-plugin")} == daemons
    alive = {p.metadata.uid for p in cluster.pods(ns.name, "app=filler") if not p.metadata.deletion_timestamp}
    evicted = {uid: node for uid, node in fillers.items() if uid not in alive}
    assert evicted, "the gang needed room: some filler pods must have gone"
    assert {cluster.core.read_node(node).metadata.labels[BLOCK] for node in evicted.values()} == {block}
    assert len(evicted) <= 8                     # one block's fillers at most, not all 16


def test_exclusive_lws_groups_take_a_rack_each_beside_daemonset_and_replicaset_pods(cluster, busy_cluster):
    """`exclusive-topology` keeps out other LWS groups, not the device plugin or the filler pods: each of
    the two groups lands in a rack of its own although every rack runs DaemonSet and ReplicaSet pods."""
    ns = busy_cluster
    worker = {"spec": {"schedulerName": "tas-scheduler", "containers": [container(gpus=2)]}}
    cluster.create_with_pods(ns.name, {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve", "annotations": {"leaderworkerset.sigs.k8s.io/exclusive-topology": RACK}},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2, "workerTemplate": worker}}})
    bound = cluster.wait_bound(ns.name, 4, "leaderworkerset.sigs.k8s.io/name=serve")
    racks = {}
    for pod in bound:
        group = pod.metadata.labels["leaderworkerset.sigs.k8s.io/group-index"]
        racks.setdefault(group, set()).update(distinct(cluster, [pod], RACK))
    assert all(len(r) == 1 for r in racks.values()) and len(set.union(*racks.values())) == 2, racks
    assert len([p for p in cluster.pods(ns.name, "app=filler") if p.spec.node_name]) == 16
