"""Workload objects and pods as their controllers make them, and checks of where pods landed."""
from __future__ import annotations

from collections import Counter

from cluster import GPU, LEVELS, TOPOLOGY

ZONE, BLOCK, RACK, HOST = LEVELS
GATE = "e2e.example.com/hold"
HIGH, LOW = "e2e-high", "e2e-low"          # PriorityClasses of the `priority_classes` fixture (1000, 10)


def container(gpus: int = 0, cpu: str | None = None) -> dict:
    resources = {"limits": {GPU: str(gpus)}} if gpus else {}
    if cpu:
        resources.setdefault("requests", {})["cpu"] = cpu
    return {"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"], "resources": resources}


def indexed_job(name: str, pods: int, gpus: int, annotations: dict, template_annotations: dict | None = None,
                priority_class: str | None = None) -> dict:
    spec = {"schedulerName": "tas-scheduler", "restartPolicy": "Never", "containers": [container(gpus)]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "annotations": annotations},
            "spec": {"completionMode": "Indexed", "completions": pods, "parallelism": pods, "backoffLimit": 0,
                     "template": {"metadata": {"annotations": template_annotations or {}}, "spec": spec}}}


def topology(required: str | None = None, preferred: str | None = None) -> dict:
    annotations = {"kai.scheduler/topology": TOPOLOGY}
    if required:
        annotations["kai.scheduler/topology-required-placement"] = required
    if preferred:
        annotations["kai.scheduler/topology-preferred-placement"] = preferred
    return annotations


def segments(size: int, required: str) -> dict:
    return {"kai.scheduler/segment-size": str(size), "kai.scheduler/segment-topology-required-placement": required}


def owned_pod(owner: dict, name: str, labels: dict, spec: dict, annotations: dict | None = None) -> dict:
    """A pod as a controller creates it: labels, a controller owner reference to `owner` (as read back)."""
    meta = owner["metadata"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels, "annotations": annotations or {},
                         "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                              "name": meta["name"], "uid": meta["uid"], "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": spec}


def node_labels(cluster, pods) -> dict[str, dict]:
    """Each bound pod's name -> the labels of its node."""
    nodes = {}
    for pod in pods:
        if pod.spec.node_name not in nodes:
            nodes[pod.spec.node_name] = cluster.core.read_node(pod.spec.node_name).metadata.labels
    return {pod.metadata.name: nodes[pod.spec.node_name] for pod in pods}


def distinct(cluster, pods, level: str) -> set[str]:
    labels = node_labels(cluster, pods)
    return {labels[p.metadata.name][level] for p in pods}


def gpus_per_node(cluster, namespace: str | None = None) -> Counter:
    """GPUs requested by bound pods, per node (all namespaces unless one is named)."""
    pods = (cluster.core.list_namespaced_pod(namespace) if namespace else cluster.core.list_pod_for_all_namespaces()).items
    used: Counter = Counter()
    for pod in pods:
        if pod.spec.node_name:
            for c in pod.spec.containers:
                limits = (c.resources.limits or {}) if c.resources else {}
                used[pod.spec.node_name] += int(limits.get(GPU, 0))
    return used


def assert_no_node_over(cluster, gpus_per_node_allocatable: int) -> None:
    over = {node: used for node, used in gpus_per_node(cluster).items() if used > gpus_per_node_allocatable}
    assert not over, f"nodes over their {gpus_per_node_allocatable} GPUs: {over}"


def tfjob(name: str, workers: int, annotations: dict) -> dict:
    def replica(count: int, gpus: int = 0, cpu: str | None = None, template_annotations: dict | None = None):
        spec = {"schedulerName": "tas-scheduler", "restartPolicy": "Never", "containers": [container(gpus, cpu)]}
        return {"replicas": count, "template": {"metadata": {"annotations": template_annotations or {}},
                                                "spec": spec}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name, "annotations": annotations},
            "spec": {"tfReplicaSpecs": {"Chief": replica(1, gpus=4), "PS": replica(2, cpu="2"),
                                        "Worker": replica(workers, gpus=8, template_annotations=segments(4, "rack"))}}}


def gated_gang(cluster, ns, name: str, held: range, host_port: int | None = None,
               annotations: dict | None = None) -> list[str]:
    """An 8-pod x 8-GPU TFJob gang (block, segments of 4 on racks) whose workers in `held` carry a scheduling
    gate: the others are planned with the whole gang and bind; the held ones wait for `release`. With
    `host_port`, each worker asks for that host port; `annotations` go on the TFJob."""
    job = tfjob(name, 8, topology(required="block"))
    job["metadata"].setdefault("annotations", {}).update(annotations or {})
    # a gang bound in part on purpose: kube-scheduler's own gang gate (a native PodGroup, where served) would
    # bind it only whole, so it opts out of that gate
    job["metadata"]["annotations"]["tas-extender.io/native-gate"] = "off"
    del job["spec"]["tfReplicaSpecs"]["Chief"], job["spec"]["tfReplicaSpecs"]["PS"]
    if host_port:
        worker = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        worker["ports"] = [{"containerPort": host_port, "hostPort": host_port}]
    original = cluster.create_pods
    names = []

    def gate_some(namespace, pods, **kwargs):
        # the held pods first: the last pod created is one the scheduler may place, and its binding is the
        # event that sends the gang's earlier (refused: "waiting for more pods") pods back to scheduling
        pods = sorted(pods, key=lambda pod: int(pod["metadata"]["labels"][
            "training.kubeflow.org/replica-index"]) not in held)
        for pod in pods:
            names.append(pod["metadata"]["name"])
            if int(pod["metadata"]["labels"]["training.kubeflow.org/replica-index"]) in held:
                pod["spec"]["schedulingGates"] = [{"name": GATE}]
        original(namespace, pods, **kwargs)
    cluster.create_pods = gate_some
    try:
        cluster.create_with_pods(ns.name, job)
    finally:
        del cluster.create_pods
    return [n for n in names if int(n.rsplit("-", 1)[1]) in held]


def release(cluster, ns, pods: list[str]) -> None:
    for name in pods:
        cluster.core.patch_namespaced_pod(name, ns.name, {"spec": {"schedulingGates": None}})


def plan_slots(cluster, gang_namespace: str) -> dict[str, str]:
    """The extender's plan for the namespace's gang: pod slot -> planned node (from the debug API)."""
    (plan,) = [p for p in cluster.debug("plans")["plans"] if p["gang"].startswith(f"{gang_namespace}/")]
    return {s["slot"]: s["node"] for s in cluster.debug(f"plans/{plan['gang']}")["slots"]}


THREE_RACKS = {f"{r}{n}": ("zone-a", "block-a", f"rack-{r}") for r in "xyz" for n in range(4)}
ELSEWHERE = {f"o{n}": ("zone-a", "block-o", "rack-o") for n in range(4)}


def held_over(metrics: str, limit: float) -> float:
    """Filter calls the extender held longer than `limit` seconds (tas_extender_member_wait_seconds)."""
    total, within = 0.0, 0.0
    for line in metrics.splitlines():
        if line.startswith("tas_extender_member_wait_seconds_count"):
            total += float(line.split()[-1])
        if line.startswith("tas_extender_member_wait_seconds_bucket") and f'le="{limit}"' in line:
            within += float(line.split()[-1])
    return total - within
