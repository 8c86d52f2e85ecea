"""Issue 34 on the real control plane: a fragmented cluster, the fragmentation gauges read from /metrics,
a refused gang told what would make it fit, the advice followed by hand with `kubectl delete`, and the
gang landing where the advice said."""
from __future__ import annotations

import re
import ssl
import time
import urllib.request

from cluster import GPU, TOPOLOGY
from workloads import BLOCK, HIGH, LOW, container, distinct, indexed_job, topology

TWO_BLOCKS = {f"{b}{n}": ("zone-a", f"block-{b}", f"rack-{b}") for b in "xy" for n in range(4)}


def metrics(cluster) -> dict[tuple[str, ...], float]:
    """The fragmentation gauges of our topology: (name, level[, shape]) -> value."""
    context = ssl.create_default_context(cafile=str(cluster.plane.certs.ca_crt))
    with urllib.request.urlopen(f"{cluster.url}/metrics", context=context, timeout=5) as answer:
        text = answer.read().decode()
    found = {}
    for line in text.splitlines():
        match = re.match(r'(tas_extender_(?:free_domains|largest_placeable))\{(.*)\} (\S+)$', line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        if labels.get("topology") == TOPOLOGY:
            found[(match.group(1), labels["level"], *([labels["shape"]] if "shape" in labels else []))] = \
                float(match.group(3))
    return found


def squatter(name: str, node: str) -> dict:
    """A bare high-priority pod holding 2 GPUs of one node (bound directly: the cluster as it fragmented)."""
    spec = {"nodeName": node, "priorityClassName": HIGH, "tolerations": [{"operator": "Exists"}],
            "containers": [container(gpus=2)]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "squatter"}}, "spec": spec}


def test_fragmented_cluster_metric_advice_followed_by_hand_then_the_gang_lands_there(cluster, ns, priority_classes):
    """Two blocks of four 8-GPU nodes; high-priority pods hold 2 GPUs on three nodes of each block, so 52 GPUs
    are free but no block has four whole nodes. (One whole node per block is left so that the gang's pods
    pass kube-scheduler's own resource filter and reach the extender: a pod that fits no single node is
    refused by kube-scheduler before any extender is asked.)"""
    nodes = ns.add_nodes(TWO_BLOCKS)
    held = [node for node in nodes if node[-1] != "3"]
    cluster.create_pods(ns.name, [squatter(f"squat-{node[-2:]}", node) for node in held])
    deadline = time.monotonic() + 30
    while metrics(cluster).get(("tas_extender_largest_placeable", "cluster", f"{GPU}=1")) != 52:
        assert time.monotonic() < deadline, metrics(cluster)
        time.sleep(0.3)
    gauges = metrics(cluster)
    assert gauges[("tas_extender_free_domains", "block")] == 0
    assert gauges[("tas_extender_free_domains", "host")] == 2
    assert gauges[("tas_extender_largest_placeable", "block", f"{GPU}=8")] == 1
    assert gauges[("tas_extender_largest_placeable", "block", f"{GPU}=1")] == 26

    ns.apply(indexed_job("big", 4, 8, topology(required="block"), priority_class=LOW))
    gang = None
    deadline = time.monotonic() + 60
    while gang is None or "cannot preempt" not in gang["reason"]:
        assert time.monotonic() < deadline, (gang, cluster.describe(ns.name))
        time.sleep(0.5)
        gang = next((p for p in cluster.debug("plans")["plans"] if p["namespace"] == ns.name), None)
    assert re.search(r"fits in \S*block-[xy] if .*squat-.* \(priority 1000\).* evicted; this gang's priority 10 "
                     r"cannot preempt them", gang["reason"]), gang["reason"]
    assert not [p for p in cluster.pods(ns.name, "job-name=big") if p.spec.node_name]

    advice = cluster.debug(f"whatif/{gang['gang']}", timeout=15)
    assert advice["verdict"] == "needs-priority"
    victims = sorted(v["pod"].split("/", 1)[1] for v in advice["victims"])
    assert len(victims) == 3 and all(name.startswith("squat-") for name in victims)
    block = advice["domain"].rsplit("/", 1)[-1]
    assert {cluster.core.read_node(v["node"]).metadata.labels[BLOCK] for v in advice["victims"]} == {block}
    assert len(cluster.pods(ns.name, "app=squatter")) == 6                  # the advice changed nothing

    cluster.plane.kubectl("-n", ns.name, "delete", "pod", *victims, "--wait=false")
    bound = cluster.wait_bound(ns.name, 4, "job-name=big", timeout=90)
    assert distinct(cluster, bound, BLOCK) == {block}
    assert sorted(p.spec.node_name for p in bound) == sorted(advice["placement"].values())
    survivors = {p.metadata.name for p in cluster.pods(ns.name, "app=squatter") if not p.metadata.deletion_timestamp}
    assert survivors == {f"squat-{node[-2:]}" for node in held} - set(victims)


def test_a_gpu_pod_of_no_gang_fills_a_partly_used_node_and_leaves_whole_racks_free(cluster, ns, priority_classes):
    """Issue 34 part 4 on the real control plane: two racks of two nodes; one node of rack x holds 2 GPUs.
    Three 2-GPU pods of no gang, one after another, go to that node (binpack scores, weight 20 in the
    shipped profile) instead of spreading: rack y stays whole."""
    nodes = ns.add_nodes({f"{r}{n}": ("zone-a", "block-a", f"rack-{r}") for r in "xy" for n in range(2)})
    used = nodes[0]
    cluster.create_pods(ns.name, [squatter("squat", used)])
    for i in range(3):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"notebook-{i}", "labels": {"app": "notebook"}},
               "spec": {"schedulerName": "tas-scheduler", "tolerations": [{"operator": "Exists"}],
                        "containers": [container(gpus=2)]}}
        cluster.create_pods(ns.name, [pod])
        cluster.wait_bound(ns.name, i + 1, "app=notebook")
    placed = {p.metadata.name: p.spec.node_name for p in cluster.pods(ns.name, "app=notebook")}
    assert set(placed.values()) == {used}, placed
    whole = metrics(cluster)[("tas_extender_free_domains", "rack")]
    assert whole == 1                                            # rack y: both nodes entirely free


def test_a_gang_kube_scheduler_refuses_itself_is_advised_by_its_workload_name(cluster, ns, priority_classes):
    """Every node holds 2 GPUs: a pod of 8 GPUs fits on no node, so kube-scheduler refuses the gang's pods
    in its own filters and never asks the extender; the gauges still show why, and the advice, asked by
    the Job's name, names the pods whose eviction lets it fit. Followed by hand, the gang lands there."""
    nodes = ns.add_nodes(TWO_BLOCKS)
    cluster.create_pods(ns.name, [squatter(f"squat-{node[-2:]}", node) for node in nodes])
    ns.apply(indexed_job("big", 4, 8, topology(required="block"), priority_class=LOW))
    deadline = time.monotonic() + 30
    while len([p for p in cluster.pods(ns.name, "job-name=big")]) < 4 or \
            metrics(cluster).get(("tas_extender_largest_placeable", "cluster", f"{GPU}=8")) != 0:
        assert time.monotonic() < deadline, cluster.describe(ns.name)
        time.sleep(0.3)
    assert not any(p["namespace"] == ns.name for p in cluster.debug("plans")["plans"])   # never reached us
    advice = cluster.debug(f"whatif/{ns.name}/big", timeout=15)
    assert advice["status"] == "unplanned" and advice["verdict"] == "needs-priority", (advice["text"], advice.get("domains"))
    victims = sorted(v["pod"].split("/", 1)[1] for v in advice["victims"])
    assert len(victims) == 4
    block = advice["domain"].rsplit("/", 1)[-1]
    cluster.plane.kubectl("-n", ns.name, "delete", "pod", *victims, "--wait=false")
    bound = cluster.wait_bound(ns.name, 4, "job-name=big", timeout=90)
    assert distinct(cluster, bound, BLOCK) == {block}
