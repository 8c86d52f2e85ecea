"""Shared fixtures. Keep this small: put helpers a single test file needs in that file."""
from __future__ import annotations

import pytest

from topology.cluster import Cluster
from topology.demo import demo_objects
from topology.objects import ClusterObjects


@pytest.fixture
def demo_cluster() -> Cluster:
    """A fresh demo cluster (2 zones x 2 blocks x 2 racks x 4 nodes of 8 GPUs, some busy)."""
    return Cluster.from_objects(ClusterObjects.from_objects(demo_objects()))
