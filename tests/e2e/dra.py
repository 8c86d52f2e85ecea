"""DRA objects as NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu) publishes them, written by hand.

No kubelet plugin runs here: the tests publish each node's ResourceSlices themselves, the way the driver's
kubelet plugin does (one pool per node, named after it), and kube-scheduler's DynamicResources plugin
allocates from them; kube-controller-manager's resourceclaim controller makes claims from templates.

What the driver publishes, as its source says (cmd/gpu-kubelet-plugin): a full GPU is device `gpu-<minor>`
with the attributes `type` ("gpu"), `uuid`, `productName`, `brand`, `architecture`, `cudaComputeCapability`,
`driverVersion` (versions), the standard `resource.kubernetes.io/pcieRoot`, and the capacity `memory` (bytes).
A MIG partition `gpu-<minor>-mig-<profile>-<id>-<start>` has `type` "mig", `parentUUID`, `profile` and
consumes counters (`multiprocessors`, `memory`, `memory-slice-<i>`) of its GPU's counter set
`gpu-<minor>-counter-set`; the full GPU consumes all of them. Since Kubernetes 1.35 a slice holds either
`sharedCounters` or `devices`, so a MIG node's pool has one counters slice plus one devices slice.
ComputeDomains (GB200/GB300 NVL72) are devices of the driver `compute-domain.nvidia.com` (`type` "channel" or
"daemon", an int `id`). The driver at HEAD no longer publishes an `index` or `minor` attribute.
"""
from __future__ import annotations

import uuid as uuidlib

DRIVER = "gpu.nvidia.com"
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
GPU = "nvidia.com/gpu"
RESOURCE_API = "resource.k8s.io/v1"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
H100 = {"productName": "NVIDIA H100 80GB HBM3", "architecture": "Hopper", "memory": 80 * 2**30}
# the driver's deviceclass-gpu.yaml: its CEL selector, and the extended resource it serves
GPU_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
MIG_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"


def device_class(name: str = GPU_CLASS, expression: str = GPU_SELECTOR,
                 extended_resource: str | None = GPU) -> dict:
    spec: dict = {"selectors": [{"cel": {"expression": expression}}]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {"apiVersion": RESOURCE_API, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def _string(value: str) -> dict:
    return {"string": value}


def gpu_device(node: str, minor: int, gpu: dict = H100, pcie_roots: int = 2, gpus: int = 8) -> dict:
    """Full GPU `gpu-<minor>` of `node`; GPUs 0..gpus/2-1 share the first PCIe root, the rest the second."""
    root = minor * pcie_roots // gpus
    return {"name": f"gpu-{minor}",
            "attributes": {"type": _string("gpu"), "uuid": _string(gpu_uuid(node, minor)),
                           "productName": _string(gpu["productName"]), "brand": _string("Nvidia"),
                           "architecture": _string(gpu["architecture"]),
                           "cudaComputeCapability": {"version": "9.0.0"},
                           "driverVersion": {"version": "580.95.5"},
                           "cudaDriverVersion": {"version": "13.0.0"},
                           PCIE_ROOT: _string(f"pci0000:{root:02x}")},
            "capacity": {"memory": {"value": str(gpu["memory"])}}}


def gpu_uuid(node: str, minor: int) -> str:
    return f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f'{node}/{minor}')}"


def node_slice(node: str, devices: list[dict] | None = None, *, counters: list[dict] | None = None,
               part: str = "gpus", slices: int = 1, generation: int = 1, driver: str = DRIVER) -> dict:
    """One ResourceSlice of the node's pool (the pool is named after the node, as the driver names it)."""
    spec: dict = {"driver": driver, "nodeName": node,
                  "pool": {"name": node, "generation": generation, "resourceSliceCount": slices}}
    if counters is not None:
        spec["sharedCounters"] = counters
    else:
        spec["devices"] = devices or []
    return {"apiVersion": RESOURCE_API, "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver.split('.')[0]}-{part}"}, "spec": spec}


def gpu_slice(node: str, gpus: int = 8, gpu: dict = H100, generation: int = 1) -> dict:
    """The node's 8 full GPUs as one slice, as the driver publishes a node without MIG."""
    return node_slice(node, [gpu_device(node, minor, gpu, gpus=gpus) for minor in range(gpus)],
                      generation=generation)


# A MIG layout for tests: each GPU offers its whole self or two halves ("3g.40gb"); 7 SMs, 8 memory slices.
SMS, MEMORY_SLICES = 7, 8


def counter_set(minor: int) -> dict:
    counters = {"multiprocessors": {"value": str(SMS)}, "memory": {"value": str(H100["memory"])}}
    counters.update({f"memory-slice-{i}": {"value": "1"} for i in range(MEMORY_SLICES)})
    return {"name": f"gpu-{minor}-counter-set", "counters": counters}


def _consumes(minor: int, sms: int, memory: int, start: int, size: int) -> list[dict]:
    counters = {"multiprocessors": {"value": str(sms)}, "memory": {"value": str(memory)}}
    counters.update({f"memory-slice-{i}": {"value": "1"} for i in range(start, start + size)})
    return [{"counterSet": f"gpu-{minor}-counter-set", "counters": counters}]


def mig_devices(node: str, minor: int) -> list[dict]:
    """The full GPU (consuming every counter) and its two 3g.40gb partitions (each half of them)."""
    full = gpu_device(node, minor)
    full["consumesCounters"] = _consumes(minor, SMS, H100["memory"], 0, MEMORY_SLICES)
    halves = []
    for half in range(2):
        start = half * MEMORY_SLICES // 2
        halves.append({
            "name": f"gpu-{minor}-mig-3g40gb-9-{start}",
            "attributes": {"type": _string("mig"), "parentUUID": _string(gpu_uuid(node, minor)),
                           "profile": _string("3g.40gb"), "productName": _string(H100["productName"])},
            "capacity": {"multiprocessors": {"value": "3"}, "memory": {"value": str(40 * 2**30)}},
            "consumesCounters": _consumes(minor, 3, 40 * 2**30, start, MEMORY_SLICES // 2)})
    return [full, *halves]


def mig_slices(node: str, gpus: int = 8) -> list[dict]:
    """The node's pool as the driver publishes it with partitionable devices on Kubernetes >= 1.35: one
    slice of counter sets, one of devices."""
    return [node_slice(node, counters=[counter_set(m) for m in range(gpus)], part="counters", slices=2),
            node_slice(node, [d for m in range(gpus) for d in mig_devices(node, m)], part="mig", slices=2)]


def compute_domain_slice(node: str, channels: int = 1) -> dict:
    """The IMEX channels of the compute-domain driver on one node (ComputeDomains of NVL72 racks)."""
    devices = [{"name": f"channel-{i}", "attributes": {"type": _string("channel"), "id": {"int": i}}}
               for i in range(channels)]
    return node_slice(node, devices, part="channels", driver=COMPUTE_DOMAIN_DRIVER)


def claim_template(name: str, count: int = 8, device_class_name: str = GPU_CLASS,
                   match_attribute: str | None = None) -> dict:
    spec: dict = {"devices": {"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": device_class_name, "count": count}}]}}
    if match_attribute:
        spec["devices"]["constraints"] = [{"requests": ["gpus"], "matchAttribute": match_attribute}]
    return {"apiVersion": RESOURCE_API, "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": spec}}


def claim(name: str, count: int = 1, device_class_name: str = GPU_CLASS) -> dict:
    return {"apiVersion": RESOURCE_API, "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": device_class_name, "count": count}}]}}}


def allocated_devices(claim_object) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of each device a claim (a dict as the API server returns it) holds."""
    results = (((claim_object.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
    return [(r["driver"], r["pool"], r["device"]) for r in results or []]
