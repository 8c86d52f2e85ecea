"""Issue 13 item 6 on the real control plane: kube-scheduler's InterPodAffinity filter and the plan agree
on one pod per host."""
from __future__ import annotations

from workloads import HOST, RACK, distinct, indexed_job, topology

ONE_PER_HOST = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "serve"}}, "topologyKey": "kubernetes.io/hostname"}]}}


def test_hostname_anti_affinity_spreads_the_gang_one_pod_per_node(cluster, ns):
    """Rack a (2 nodes) is the tightest rack for 4 x 2 GPUs packed; one pod per host only rack b holds."""
    ns.add_nodes({"a0": ("zone-a", "block-a", "rack-a"), "a1": ("zone-a", "block-a", "rack-a"),
                  **{f"b{i}": ("zone-a", "block-a", "rack-b") for i in range(4)}})
    job = indexed_job("serve", 4, 2, topology(required="rack"))
    template = job["spec"]["template"]
    template["metadata"]["labels"] = {"app": "serve"}
    template["spec"]["affinity"] = ONE_PER_HOST
    ns.apply(job)
    bound = cluster.wait_bound(ns.name, 4, "job-name=serve")
    assert len({p.spec.node_name for p in bound}) == 4          # 4 x 2 GPUs would pack onto one 8-GPU node
    assert len(distinct(cluster, bound, RACK)) == 1
    assert len(distinct(cluster, bound, HOST)) == 4


def test_rack_anti_affinity_to_a_running_pod_keeps_the_gang_out_of_its_rack(cluster, ns):
    """A pod labelled app=noisy runs in rack a (bound by the default scheduler); the gang repels it on
    the rack key: the plan uses rack b, and kube-scheduler's InterPodAffinity filter agrees."""
    ns.add_nodes({**{f"a{i}": ("zone-a", "block-a", "rack-a") for i in range(4)},
                  **{f"b{i}": ("zone-a", "block-a", "rack-b") for i in range(4)}})
    ns.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "noisy", "labels": {"app": "noisy"}},
              "spec": {"schedulerName": "default-scheduler", "nodeSelector": {"kubernetes.io/hostname": f"{ns.name}-a0"},
                       "tolerations": [{"operator": "Exists"}],
                       "containers": [{"name": "main", "image": "busybox:1.36"}]}})
    cluster.wait_bound(ns.name, 1)
    job = indexed_job("quiet", 2, 8, topology(required="block"))
    job["spec"]["template"]["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "noisy"}}, "topologyKey": RACK}]}}
    ns.apply(job)
    bound = cluster.wait_bound(ns.name, 2, "job-name=quiet")
    assert distinct(cluster, bound, RACK) == {f"{ns.name}-rack-b"}
