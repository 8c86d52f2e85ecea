"""Shared fixtures. Keep this small: put helpers a single test file needs in that file."""
from __future__ import annotations

import os

import pytest
from hypothesis import settings

# No per-example deadline anywhere (a loaded 2-core machine must not fail a property). On CI the
# examples are derived from each test's name, so a red run is reproducible and a green main stays green;
# locally every run explores new examples.
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

from topology.cluster import Cluster
from topology.demo import demo_objects
from topology.objects import ClusterObjects


@pytest.fixture
def demo_cluster() -> Cluster:
    """A fresh demo cluster (2 zones x 2 blocks x 2 racks x 4 nodes of 8 GPUs, some busy)."""
    return Cluster.from_objects(ClusterObjects.from_objects(demo_objects()))
