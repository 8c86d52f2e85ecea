"""The built-in demo cluster: 2 zones x 2 blocks x 2 racks x 4 nodes of 8 GPUs, a few of them busy,
one NotReady and one tainted, described by a KAI Topology and a Kueue Topology."""
from __future__ import annotations

from .tree import HOSTNAME_LABEL

ZONE_LABEL = "topology.kubernetes.io/zone"
BLOCK_LABEL = "network.example.com/block"
RACK_LABEL = "network.example.com/rack"
HOST_LABEL = HOSTNAME_LABEL
GPU = "nvidia.com/gpu"


def _node(index: int, zone: str, block: str, rack: str) -> dict:
    name = f"node-{index:02d}"
    node = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            ZONE_LABEL: zone, BLOCK_LABEL: block, RACK_LABEL: rack, HOST_LABEL: name,
            "nvidia.com/gpu.product": "H100-SXM"}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "96", "memory": "1024Gi", GPU: "8", "pods": "110"},
            "capacity": {"cpu": "96", "memory": "1024Gi", GPU: "8", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    return node


def _pod(name: str, node: str, gpus: int, namespace: str = "research") -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"demo-{name}"},
        "spec": {"nodeName": node, "priority": 0, "containers": [{
            "name": "main", "image": "busybox",
            "resources": {"requests": {"cpu": "8", "memory": "64Gi", GPU: str(gpus)},
                          "limits": {GPU: str(gpus)}}}]},
        "status": {"phase": "Running"},
    }


def demo_objects() -> list[dict]:
    objects: list[dict] = []
    index = 1
    for zone in ("zone-a", "zone-b"):
        for block in (1, 2):
            for rack in (1, 2):
                for _ in range(4):
                    block_name = f"{zone[-1]}-block-{block}"
                    objects.append(_node(index, zone, block_name, f"{block_name}-rack-{rack}"))
                    index += 1
    by_name = {o["metadata"]["name"]: o for o in objects}
    by_name["node-16"]["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]
    by_name["node-24"]["spec"]["taints"] = [{"key": "maintenance", "value": "nic-firmware", "effect": "NoSchedule"}]
    objects += [
        _pod("inference-0", "node-01", 4), _pod("inference-1", "node-02", 4),
        _pod("notebook-ana", "node-09", 8), _pod("eval-small-0", "node-17", 2),
        _pod("eval-small-1", "node-18", 2), _pod("tuning-0", "node-25", 8), _pod("tuning-1", "node-26", 8),
    ]
    objects.append({
        "apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "default"},
        "spec": {"levels": [
            {"nodeLabel": ZONE_LABEL, "alias": "zone"}, {"nodeLabel": BLOCK_LABEL, "alias": "block"},
            {"nodeLabel": RACK_LABEL, "alias": "rack"}, {"nodeLabel": HOST_LABEL, "alias": "host"}]},
    })
    objects.append({
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology", "metadata": {"name": "kueue-default"},
        "spec": {"levels": [{"nodeLabel": BLOCK_LABEL}, {"nodeLabel": RACK_LABEL}, {"nodeLabel": HOST_LABEL}]},
    })
    return objects
