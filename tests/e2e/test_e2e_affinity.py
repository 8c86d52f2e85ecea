"""Issue 13 item 6 on the real control plane: kube-scheduler's InterPodAffinity filter and the plan agree
on one pod per host; so do its NodePorts filter (host ports, hostNetwork) and its PodTopologySpread
filter (DoNotSchedule on the hostname), which hold a role to a few pods per node whatever the node's room."""
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


def serve_job(name: str, pods: int, gpus: int) -> dict:
    job = indexed_job(name, pods, gpus, topology(required="rack"))
    job["spec"]["template"]["metadata"]["labels"] = {"app": name}
    return job


def racks_of_two_and_four(ns) -> None:
    """Rack a (2 nodes) is the tightest rack for 4 x 2 GPUs packed; rack b has 4 nodes."""
    ns.add_nodes({"a0": ("zone-a", "block-a", "rack-a"), "a1": ("zone-a", "block-a", "rack-a"),
                  **{f"b{i}": ("zone-a", "block-a", "rack-b") for i in range(4)}})


def test_host_network_ports_keep_the_gang_one_pod_per_node(cluster, ns):
    """hostNetwork pods declaring a port (NCCL and MPI jobs on RDMA clusters): the API server makes the
    container port a host port, and kube-scheduler's NodePorts filter takes one such pod per node."""
    racks_of_two_and_four(ns)
    job = serve_job("hostnet", 4, 2)
    spec = job["spec"]["template"]["spec"]
    spec["hostNetwork"] = True
    spec["containers"][0]["ports"] = [{"containerPort": 29500, "name": "rendezvous"}]
    ns.apply(job)
    bound = cluster.wait_bound(ns.name, 4, "job-name=hostnet")
    assert all(p.spec.containers[0].ports[0].host_port == 29500 for p in bound)     # as admitted
    assert len(distinct(cluster, bound, HOST)) == 4
    assert distinct(cluster, bound, RACK) == {f"{ns.name}-rack-b"}


def test_a_host_port_another_pod_holds_keeps_the_gang_off_that_node(cluster, ns):
    """A pod of another workload holds port 29500 on a0. Rack a (4 nodes) is the tightest rack for 4 pods
    of 8 GPUs, but with a0 out it holds 3; rack b (5 nodes) holds them all. The plan is not told about
    other pods' ports: kube-scheduler's NodePorts filter leaves a0 out of the candidates it sends with the
    first pod, and the role is planned on those."""
    ns.add_nodes({**{f"a{i}": ("zone-a", "block-a", "rack-a") for i in range(4)},
                  **{f"b{i}": ("zone-a", "block-a", "rack-b") for i in range(5)}})
    ns.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "port-holder"},
              "spec": {"schedulerName": "default-scheduler", "nodeSelector": {"kubernetes.io/hostname": f"{ns.name}-a0"},
                       "tolerations": [{"operator": "Exists"}],
                       "containers": [{"name": "main", "image": "busybox:1.36",
                                       "ports": [{"containerPort": 29500, "hostPort": 29500}]}]}})
    cluster.wait_bound(ns.name, 1)
    job = serve_job("ported", 4, 8)
    job["spec"]["template"]["spec"]["containers"][0]["ports"] = [{"containerPort": 29500, "hostPort": 29500}]
    ns.apply(job)
    bound = cluster.wait_bound(ns.name, 4, "job-name=ported")
    assert distinct(cluster, bound, RACK) == {f"{ns.name}-rack-b"}


def test_hostname_topology_spread_holds_the_gang_to_max_skew_per_node(cluster, ns):
    """maxSkew 2 on the hostname, DoNotSchedule: 8 pods of 1 GPU take at most 2 per node, so rack a
    (2 nodes of 8 GPUs, the tightest by GPUs) holds 4 of them and rack b (4 nodes) all 8."""
    racks_of_two_and_four(ns)
    job = serve_job("spread", 8, 1)
    job["spec"]["template"]["spec"]["topologySpreadConstraints"] = [{
        "maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}}}]
    ns.apply(job)
    bound = cluster.wait_bound(ns.name, 8, "job-name=spread")
    per_node: dict[str, int] = {}
    for pod in bound:
        per_node[pod.spec.node_name] = per_node.get(pod.spec.node_name, 0) + 1
    assert max(per_node.values()) == 2, per_node
    assert distinct(cluster, bound, RACK) == {f"{ns.name}-rack-b"}


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
