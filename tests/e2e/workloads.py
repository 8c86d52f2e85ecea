"""Workload objects and pods as their controllers make them, and checks of where pods landed."""
from __future__ import annotations

from collections import Counter

from cluster import GPU, LEVELS, TOPOLOGY

ZONE, BLOCK, RACK, HOST = LEVELS


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
