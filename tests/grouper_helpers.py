"""Helpers for the grouper tests: fixture manifests and the demo topologies."""
from __future__ import annotations

import copy
from pathlib import Path

import yaml

from topology.cluster import Cluster
from topology.demo import demo_objects
from topology.objects import ClusterObjects

WORKLOADS = Path(__file__).parent / "fixtures" / "workloads"


def load(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((WORKLOADS / name).read_text()) if doc]


def workload(name: str) -> dict:
    return copy.deepcopy(load(name)[0])


def demo_topologies():
    return Cluster.from_objects(ClusterObjects.from_objects(demo_objects())).topologies


def leaves(tree) -> dict:
    return {g.name: g for g in tree.groups() if g.is_leaf}
