"""The built-in demo cluster: 2 zones x 2 blocks x 2 racks x 4 nodes of 8 GPUs on the device plugin, plus
one rack of 4 nodes whose 8 GPUs are published through DRA (one of them partitionable into MIG instances),
a few of them busy, one NotReady and one tainted, described by a KAI Topology and a Kueue Topology."""
from __future__ import annotations

import copy

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
    objects += dra_rack_objects()
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


# ---- a demo at fleet size (`tas-extender serve --demo-size 16384`) ------------------------------------------

FLEET_RACK_NODES = 16                   # nodes per rack
FLEET_BLOCK_RACKS = 16                  # racks per block
FLEET_ZONES = 4
FLEET_UNIT = FLEET_ZONES * FLEET_BLOCK_RACKS * FLEET_RACK_NODES       # the sizes come in steps of 1,024 nodes
FLEET_GANG_SHARE = 0.5                  # the share of nodes the running gangs take


def fleet_problem(node_count: int) -> str | None:
    """Why a fleet of this size cannot be built, naming the valid sizes."""
    if node_count < FLEET_UNIT or node_count % FLEET_UNIT:
        return (f"--demo-size {node_count}: expected a multiple of {FLEET_UNIT:,} nodes "
                f"({FLEET_ZONES} zones of blocks of {FLEET_BLOCK_RACKS} racks of {FLEET_RACK_NODES} nodes), "
                f"e.g. 1024, 4096 or 16384")
    return None


def fleet_objects(node_count: int, seed: int = 1) -> list[dict]:
    """A large demo cluster: 4 zones > blocks of 16 racks > racks of 16 nodes of 8 GPUs, a few nodes
    NotReady or tainted, small plain pods on about one node in twelve, and a KAI Topology. Deterministic."""
    import random

    problem = fleet_problem(node_count)
    if problem:
        raise ValueError(problem)
    rng = random.Random(seed)
    blocks = node_count // (FLEET_ZONES * FLEET_BLOCK_RACKS * FLEET_RACK_NODES)
    objects: list[dict] = []
    index = 0
    for z in range(FLEET_ZONES):
        for b in range(blocks):
            for r in range(FLEET_BLOCK_RACKS):
                for _ in range(FLEET_RACK_NODES):
                    block = f"z{z}-block-{b:02d}"
                    node = _node(index, f"zone-{z}", block, f"{block}-rack-{r:02d}")
                    node["metadata"]["name"] = node["metadata"]["labels"][HOST_LABEL] = f"node-{index:05d}"
                    objects.append(node)
                    index += 1
    for node in rng.sample(objects, max(1, node_count // 400)):
        node["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]
    for node in rng.sample(objects, max(1, node_count // 400)):
        node["spec"]["taints"] = [{"key": "maintenance", "value": "nic-firmware", "effect": "NoSchedule"}]
    pods = []
    for number, node in enumerate(rng.sample(objects, node_count // 12)):
        kind = rng.choice(("inference", "notebook", "eval"))
        pods.append(_pod(f"{kind}-{number}", node["metadata"]["name"], rng.choice((1, 2, 4)), namespace="serving"))
    topology = next(o for o in demo_objects() if o["kind"] == "Topology" and o["metadata"]["name"] == "default")
    return objects + pods + [topology]


def fleet_workloads(node_count: int, seed: int = 1) -> tuple[list[dict], dict]:
    """(gangs that fill about half of the fleet's nodes, one gang that cannot be placed now): Indexed Jobs of
    8-GPU pods, each required in one block, in rack segments of 8, from 16 to 128 pods; the refused one
    needs a whole block, which an empty cluster would hold but none has now."""
    import random

    rng = random.Random(seed)
    running, taken, number = [], 0, 0
    while taken < node_count * FLEET_GANG_SHARE:
        pods = rng.choice((16, 16, 32, 32, 64, 64, 128))
        segment = 8                     # half a rack: a rack with a small pod on it still takes one
        team = rng.choice(("team-a", "team-b", "research", "serving"))
        running.append(_fleet_job(f"{rng.choice(('llama', 'mixtral', 'bert', 'vit', 'dit'))}-{number}", team,
                                  pods, segment))
        taken += pods
        number += 1
    refused = _fleet_job("whole-block", "research", FLEET_BLOCK_RACKS * FLEET_RACK_NODES, FLEET_RACK_NODES)
    return running, refused


def _fleet_job(name: str, namespace: str, pods: int, segment: int) -> dict:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "uid": f"fleet-{name}",
                     "annotations": {"kai.scheduler/topology": "default",
                                     "kai.scheduler/topology-required-placement": "block"}},
        "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                 "template": {"metadata": {"annotations": {
                     "kai.scheduler/segment-size": str(segment),
                     "kai.scheduler/segment-topology-required-placement": "rack"}},
                     "spec": {"containers": [{"name": "trainer", "image": "trainer:latest",
                                              "resources": {"limits": {GPU: "8"}}}]}}},
    }


# ---- GPUs published through Dynamic Resource Allocation (resource.k8s.io/v1), as NVIDIA's DRA driver does ----

DRA_DRIVER = "gpu.nvidia.com"
DRA_GPU_CLASS = {
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression":
                                    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],
             "extendedResourceName": GPU},
}
DRA_MIG_CLASS = {
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "mig.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression":
                                    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}}]},
}
MIG_SLICES = 7                          # memory slices of an H100's counter set; a 1g.10gb instance takes one


def _gpu_device(node: str, index: int, partitioned: bool) -> dict:
    device = {"name": f"gpu-{index}", "attributes": {
        "type": {"string": "gpu"}, "uuid": {"string": f"GPU-{node}-{index}"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"}, "architecture": {"string": "Hopper"},
        "index": {"int": index}, "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "580.65.6"},
        "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{index // 4:02x}"}},
        "capacity": {"memory": {"value": "80Gi"}}}
    if partitioned:
        device["consumesCounters"] = [{"counterSet": f"gpu-{index}-counter-set", "counters": {
            f"memorySlice{s}": {"value": "1"} for s in range(MIG_SLICES)}}]
    return device


def _mig_device(node: str, gpu: int, slot: int) -> dict:
    return {"name": f"gpu-{gpu}-mig-1g10gb-{slot}", "attributes": {
        "type": {"string": "mig"}, "profile": {"string": "1g.10gb"}, "parentUUID": {"string": f"GPU-{node}-{gpu}"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"}, "index": {"int": gpu}},
        "capacity": {"memory": {"value": "10Gi"}},
        "consumesCounters": [{"counterSet": f"gpu-{gpu}-counter-set",
                              "counters": {f"memorySlice{slot}": {"value": "1"}}}]}


def dra_slice(node: str, gpus: int = 8, mig: bool = False, generation: int = 1) -> dict:
    """The one ResourceSlice of a node's GPUs (with `mig`: each GPU partitionable into 1g.10gb instances
    that share its counter set, so one allocated instance makes the whole GPU not free)."""
    devices = [_gpu_device(node, i, mig) for i in range(gpus)]
    spec: dict = {"driver": DRA_DRIVER, "nodeName": node,
                  "pool": {"name": node, "generation": generation, "resourceSliceCount": 1}}
    if mig:
        devices += [_mig_device(node, i, s) for i in range(gpus) for s in range(MIG_SLICES)]
        spec["sharedCounters"] = [{"name": f"gpu-{i}-counter-set", "counters": {
            f"memorySlice{s}": {"value": "1"} for s in range(MIG_SLICES)}} for i in range(gpus)]
    spec["devices"] = devices
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRA_DRIVER}"}, "spec": spec}


def dra_node(node: dict) -> dict:
    """The node as a DRA driver leaves it: no nvidia.com/gpu in allocatable or capacity."""
    for part in ("allocatable", "capacity"):
        node["status"][part].pop(GPU, None)
    return node


def dra_claim(name: str, namespace: str, node: str, devices: list[str], request: str = "gpu") -> dict:
    """A ResourceClaim allocated on `node` (as kube-scheduler's DynamicResources plugin writes it)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": f"claim-{namespace}-{name}"},
            "spec": {"devices": {"requests": [{"name": request, "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": len(devices)}}]}},
            "status": {"allocation": {
                "devices": {"results": [{"request": request, "driver": DRA_DRIVER, "pool": node, "device": d}
                                        for d in devices]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}


# ---- the demo's DRA rack: what NVIDIA's DRA driver publishes (names as in kubernetes-sigs/dra-driver-nvidia-gpu) ----

DRA_RACK = ("zone-b", "b-block-3", "b-block-3-rack-1")
DRA_RACK_NODES = (33, 34, 35, 36)
DRA_MIG_NODE = 35                       # its GPUs are partitionable: a whole GPU or two 3g.40gb instances
H100_MEMORY = 80 * 2**30
MIG_SMS, MIG_MEMORY_SLICES = 7, 8       # the counters of one GPU's counter set in this layout


def nvidia_gpu_device(node: str, minor: int) -> dict:
    """Full GPU `gpu-<minor>` with the attributes the driver publishes (no `index`: the driver dropped it);
    GPUs 0-3 on the first PCIe root, 4-7 on the second."""
    return {"name": f"gpu-{minor}", "attributes": {
        "type": {"string": "gpu"}, "uuid": {"string": f"GPU-demo-{node}-{minor}"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"}, "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper"}, "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "580.95.5"}, "cudaDriverVersion": {"version": "13.0.0"},
        "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{minor // 4:02x}"}},
        "capacity": {"memory": {"value": str(H100_MEMORY)}}}


def _consumes(minor: int, sms: int, memory: int, start: int, size: int) -> list[dict]:
    counters = {"multiprocessors": {"value": str(sms)}, "memory": {"value": str(memory)}}
    counters.update({f"memory-slice-{i}": {"value": "1"} for i in range(start, start + size)})
    return [{"counterSet": f"gpu-{minor}-counter-set", "counters": counters}]


def nvidia_mig_devices(node: str, minor: int) -> list[dict]:
    """The full GPU (consuming every counter of its set) and its two 3g.40gb instances (half each)."""
    full = nvidia_gpu_device(node, minor)
    full["consumesCounters"] = _consumes(minor, MIG_SMS, H100_MEMORY, 0, MIG_MEMORY_SLICES)
    halves = []
    for half in range(2):
        start = half * MIG_MEMORY_SLICES // 2
        halves.append({"name": f"gpu-{minor}-mig-3g40gb-9-{start}", "attributes": {
            "type": {"string": "mig"}, "profile": {"string": "3g.40gb"},
            "parentUUID": {"string": f"GPU-demo-{node}-{minor}"}, "productName": {"string": "NVIDIA H100 80GB HBM3"}},
            "capacity": {"multiprocessors": {"value": "3"}, "memory": {"value": str(H100_MEMORY // 2)}},
            "consumesCounters": _consumes(minor, 3, H100_MEMORY // 2, start, MIG_MEMORY_SLICES // 2)})
    return [full, *halves]


def nvidia_slices(node: str, gpus: int = 8, mig: bool = False) -> list[dict]:
    """The node's pool (named after the node) as the driver publishes it: one slice of full GPUs; with
    `mig`, one slice of counter sets and one of devices (a slice holds counters or devices, not both)."""
    def one(part: str, count: int, spec: dict) -> dict:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-gpu-{part}"},
                "spec": {"driver": DRA_DRIVER, "nodeName": node,
                         "pool": {"name": node, "generation": 1, "resourceSliceCount": count}, **spec}}
    if not mig:
        return [one("gpus", 1, {"devices": [nvidia_gpu_device(node, m) for m in range(gpus)]})]
    counters = [{"name": f"gpu-{m}-counter-set", "counters": {
        "multiprocessors": {"value": str(MIG_SMS)}, "memory": {"value": str(H100_MEMORY)},
        **{f"memory-slice-{i}": {"value": "1"} for i in range(MIG_MEMORY_SLICES)}}} for m in range(gpus)]
    return [one("counters", 2, {"sharedCounters": counters}),
            one("mig", 2, {"devices": [d for m in range(gpus) for d in nvidia_mig_devices(node, m)]})]


def dra_rack_objects() -> list[dict]:
    """Nodes 33-36 (block b-block-3, one rack) without nvidia.com/gpu in allocatable, their ResourceSlices,
    the driver's DeviceClasses (`gpu.nvidia.com` serving nvidia.com/gpu, `mig.nvidia.com`), and two running
    pods with their allocated claims: 4 GPUs of node-33 (asked as nvidia.com/gpu: 4, in the claim
    kube-scheduler made), and one 3g.40gb instance of node-35's gpu-0 (a claim template's), which takes
    that whole GPU from nvidia.com/gpu."""
    zone, block, rack = DRA_RACK
    objects: list[dict] = []
    for index in DRA_RACK_NODES:
        node = dra_node(_node(index, zone, block, rack))
        objects.append(node)
        objects += nvidia_slices(node["metadata"]["name"], mig=index == DRA_MIG_NODE)
    objects += copy.deepcopy([DRA_GPU_CLASS, DRA_MIG_CLASS])
    served = _pod("inference-dra-0", "node-33", 4)
    served["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "inference-dra-0-extended-resources-demo",
        "requestMappings": [{"containerName": "main", "resourceName": GPU, "requestName": "container-0-request-0"}]}
    claim = dra_claim("inference-dra-0-extended-resources-demo", "research", "node-33",
                      [f"gpu-{i}" for i in range(4)], request="container-0-request-0")
    claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.nvidia.com"
    mig_pod = _pod("notebook-mig", "node-35", 0)
    resources = mig_pod["spec"]["containers"][0]["resources"]
    resources["requests"].pop(GPU)
    resources["limits"].pop(GPU)
    resources["claims"] = [{"name": "mig"}]
    mig_pod["spec"]["resourceClaims"] = [{"name": "mig", "resourceClaimTemplateName": "one-mig"}]
    mig_pod["status"]["resourceClaimStatuses"] = [{"name": "mig", "resourceClaimName": "notebook-mig-mig-demo"}]
    mig_claim = dra_claim("notebook-mig-mig-demo", "research", "node-35", ["gpu-0-mig-3g40gb-9-0"], request="mig")
    mig_claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "mig.nvidia.com"
    mig_claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = 1
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one-mig", "namespace": "research"},
                "spec": {"spec": {"devices": {"requests": [{"name": "mig", "exactly": {
                    "deviceClassName": "mig.nvidia.com", "count": 1}}]}}}}
    return objects + [served, claim, mig_pod, mig_claim, template]
