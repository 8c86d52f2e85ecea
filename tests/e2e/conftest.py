"""Fixtures of the end-to-end tests: one real control plane per session, a namespace and nodes per test.

Set TAS_K8S_ASSETS to a folder with etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
(`.ci/run` unpacks ../shared/k8s there); without it every test here is skipped with the reason.
"""
from __future__ import annotations

import itertools
import os
import re

import pytest

import dra
from cluster import E2ECluster
from controlplane import ControlPlane, find_binaries, gates_from_env
from workloads import HIGH, LOW


def _plane(tmp_path_factory, gates: bool, extra_gates: str = ""):
    binaries, reason = find_binaries()
    if reason:
        pytest.skip(reason)
    plane = ControlPlane(binaries, tmp_path_factory.mktemp("control-plane-gates" if gates else "control-plane"),
                         gates=gates, extra_gates=extra_gates)
    try:
        yield plane.start()
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    """The suite's control plane: native workload scheduling gates off, unless TAS_E2E_GATES=on."""
    yield from _plane(tmp_path_factory, gates_from_env())


@pytest.fixture(scope="session")
def native_cluster(request, tmp_path_factory):
    """A cluster with the native gates on (PodGroups served): the suite's own when TAS_E2E_GATES=on, else a
    second control plane started for the native tests only."""
    if gates_from_env():
        yield request.getfixturevalue("cluster")
        return
    for plane in _plane(tmp_path_factory, True):
        e2e = E2ECluster(plane)
        try:
            yield e2e.install()
        finally:
            e2e.stop()


@pytest.fixture(scope="session")
def preemption_cluster(tmp_path_factory):
    """A cluster with the native gates and WorkloadAwarePreemption on (PodGroup priorities kept, kube-scheduler's
    own workload-aware preemption instead of its per-pod one), for the native priority tests only."""
    for plane in _plane(tmp_path_factory, True, "WorkloadAwarePreemption=true"):
        e2e = E2ECluster(plane)
        try:
            yield e2e.install()
        finally:
            e2e.stop()


@pytest.fixture(scope="session")
def cluster(control_plane):
    e2e = E2ECluster(control_plane)
    try:
        e2e.install()
        if dra_from_env():
            install_dra_objects(e2e)
        yield e2e
    finally:
        e2e.stop()


def dra_from_env() -> bool:
    """TAS_E2E_DRA=on: the whole suite runs with DRA objects present from its start (the DRA tests add them
    only when they run, and leave the classes for the modules after them)."""
    value = os.environ.get("TAS_E2E_DRA", "off").lower()
    if value not in ("on", "off"):
        raise ValueError(f"TAS_E2E_DRA={value!r} is invalid; valid: on, off")
    return value == "on"


def install_dra_objects(e2e: E2ECluster) -> None:
    """NVIDIA's DeviceClasses, a pool of 8 GPUs on nodes that do not exist (a slice whose nodeSelector matches
    none) and an unallocated claim: present, yet no test's node gains or loses a GPU."""
    e2e.apply([dra.device_class(), dra.device_class(dra.MIG_CLASS, dra.MIG_SELECTOR, None)])
    nowhere = dra.gpu_slice("dra-standby")
    del nowhere["spec"]["nodeName"]
    nowhere["spec"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "e2e.example.com/dra-standby", "operator": "In", "values": ["none"]}]}]}
    e2e.create_namespace("dra-standby")
    e2e.apply([nowhere])
    e2e.apply([dra.claim("unallocated", 2)], namespace="dra-standby")


_serial = itertools.count(1)


class TestNamespace:
    """A namespace of one test, and the nodes it added; `node(...)` names are unique in the session."""

    def __init__(self, cluster: E2ECluster, name: str):
        self.cluster, self.name = cluster, name
        self.nodes: list[str] = []
        cluster.create_namespace(name)

    def add_nodes(self, layout: dict[str, tuple[str, str, str]], **kwargs) -> list[str]:
        """Nodes named `<ns>-<key>` in domains prefixed by the namespace (so tests never share a domain)."""
        nodes = {f"{self.name}-{key}": tuple(f"{self.name}-{d}" for d in domains)
                 for key, domains in layout.items()}
        self.cluster.add_gpu_nodes(nodes, labels={"e2e.example.com/test": self.name}, **kwargs)
        self.nodes += list(nodes)
        return list(nodes)

    def add_dra_nodes(self, layout: dict[str, tuple[str, str, str]], slices=None, **kwargs) -> list[str]:
        """Nodes whose GPUs are DRA devices only: no nvidia.com/gpu in allocatable, no GPU taint, each node's
        ResourceSlices (`slices(node)`, by default its 8 full GPUs) published as the driver would."""
        nodes = self.add_nodes(layout, gpus=None, taint=False, **kwargs)
        for node in nodes:
            self.cluster.publish_slices(node, (slices or (lambda name: [dra.gpu_slice(name)]))(node))
        return nodes

    def apply(self, *objects: dict) -> None:
        self.cluster.apply(list(objects), namespace=self.name)

    def close(self) -> None:
        self.cluster.clean_namespace(self.name)
        self.cluster.delete_nodes(self.nodes)


def _namespace(cluster, request):
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower().removeprefix("test_"))[:40].strip("-")
    namespace = TestNamespace(cluster, f"{name}-{next(_serial)}")
    yield namespace
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        print(cluster.extender.logs())
    namespace.close()


@pytest.fixture(scope="session")
def priority_classes(cluster):
    """PriorityClasses `e2e-high` (1000) and `e2e-low` (10) on the session cluster."""
    cluster.apply([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                    "value": value, "description": "end-to-end tests"}
                   for name, value in ((HIGH, 1000), (LOW, 10))])
    return HIGH, LOW


@pytest.fixture(scope="session")
def dra_classes(cluster):
    """NVIDIA's DeviceClasses (gpu.nvidia.com serving nvidia.com/gpu, mig.nvidia.com) on the session cluster.
    They stay for the rest of the session: the tests after the DRA ones run with DRA objects present."""
    cluster.apply([dra.device_class(), dra.device_class(dra.MIG_CLASS, dra.MIG_SELECTOR, None)])
    return cluster


@pytest.fixture
def ns(cluster, request):
    yield from _namespace(cluster, request)


@pytest.fixture
def native_ns(native_cluster, request):
    """A namespace (and nodes) on the cluster with the native gates on."""
    yield from _namespace(native_cluster, request)


@pytest.fixture
def preemption_ns(preemption_cluster, request):
    """A namespace (and nodes) on the cluster with WorkloadAwarePreemption on."""
    yield from _namespace(preemption_cluster, request)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
