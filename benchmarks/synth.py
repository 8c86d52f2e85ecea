"""A synthetic GPU cluster for benchmarks: zones > blocks > racks > nodes of 8 GPUs.

    from synth import synth_cluster_objects, synth_nodes, synth_topology
    nodes = synth_nodes(16_384)                      # NodeInfo list, quick to make
    objects = synth_cluster_objects(16_384)          # the same as Kubernetes dicts (Nodes + a KAI Topology)
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from topology.nodes import NodeInfo  # noqa: E402

ZONE_LABEL = "topology.kubernetes.io/zone"
BLOCK_LABEL = "network.example.com/block"
RACK_LABEL = "network.example.com/rack"
HOST_LABEL = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
ALLOCATABLE = {"cpu": "128", "memory": "2048Gi", GPU: "8", "pods": "110"}
ALLOCATABLE_UNITS = {"cpu": 128_000, "memory": 2048 * 2**30, GPU: 8, "pods": 110}


def shape(node_count: int, zones: int = 4, racks_per_block: int = 16, nodes_per_rack: int = 16
          ) -> tuple[int, int, int, int]:
    """(zones, blocks per zone, racks per block, nodes per rack) for exactly `node_count` nodes."""
    per_block = racks_per_block * nodes_per_rack
    if node_count % (zones * per_block):
        raise ValueError(f"node_count must be a multiple of {zones * per_block}")
    return zones, node_count // (zones * per_block), racks_per_block, nodes_per_rack


def _placements(node_count: int, **shape_args):
    zones, blocks, racks, per_rack = shape(node_count, **shape_args)
    index = 0
    for z in range(zones):
        for b in range(blocks):
            for r in range(racks):
                for _ in range(per_rack):
                    yield index, f"zone-{z}", f"z{z}-block-{b}", f"z{z}-b{b}-rack-{r}"
                    index += 1


def _labels(name: str, zone: str, block: str, rack: str) -> dict[str, str]:
    return {ZONE_LABEL: zone, BLOCK_LABEL: block, RACK_LABEL: rack, HOST_LABEL: name}


def synth_nodes(node_count: int, **shape_args) -> list[NodeInfo]:
    nodes = []
    for index, zone, block, rack in _placements(node_count, **shape_args):
        name = f"node-{index:06d}"
        nodes.append(NodeInfo(name, _labels(name, zone, block, rack), dict(ALLOCATABLE_UNITS)))
    return nodes


def synth_topology(name: str = "default") -> dict:
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": ZONE_LABEL, "alias": "zone"},
                                {"nodeLabel": BLOCK_LABEL, "alias": "block"},
                                {"nodeLabel": RACK_LABEL, "alias": "rack"},
                                {"nodeLabel": HOST_LABEL, "alias": "host"}]}}


def synth_cluster_objects(node_count: int, **shape_args) -> list[dict]:
    objects: list[dict] = []
    for index, zone, block, rack in _placements(node_count, **shape_args):
        name = f"node-{index:06d}"
        objects.append({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": name, "labels": _labels(name, zone, block, rack)},
                        "spec": {},
                        "status": {"allocatable": dict(ALLOCATABLE),
                                   "conditions": [{"type": "Ready", "status": "True"}]}})
    objects.append(synth_topology())
    return objects
