"""KubeSource (the service's list and watch) against the real API server (issue 12: prefer the real control
plane; tests/fakekube keeps the faults it cannot produce on demand: 410 Gone mid-watch, injected errors,
bookmarks on server timeouts). The cluster is shared with the other tests, so every check is scoped to
this test's namespace and names."""
from __future__ import annotations

import time

import pytest

from app.kube.client import KubeApi, build_api_client
from app.kube.sync import KubeSource
from app.ports import WATCHED_KINDS
from app.settings import parse_extra_kind
from test_kube_sync import DRA_KINDS, RecordingSink

NODES = next(k for k in WATCHED_KINDS if k.plural == "nodes")
PODS = next(k for k in WATCHED_KINDS if k.plural == "pods")
CLASSES = next(k for k in WATCHED_KINDS if k.plural == "priorityclasses")
WIDGETS = parse_extra_kind("widgets.e2e.example.com/v1=Widget")


@pytest.fixture
def start_source(cluster):
    sources = []

    def start(sink, kinds, **options) -> KubeSource:
        options = {"watch_timeout": 5.0, "absent_recheck": 0.3, "backoff_initial": 0.05, "backoff_cap": 0.2,
                   **options}
        source = KubeSource(KubeApi(build_api_client(kubeconfig=str(cluster.plane.admin_kubeconfig))), sink,
                            kinds, **options)
        sources.append(source)
        source.start()
        return source
    yield start
    for source in sources:
        source.stop()


def wait(predicate, what: str, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": "e2e-nobody", "containers": [{"name": "c", "image": "busybox:1.36"}]}}


def mine(sink: RecordingSink, kind, namespace: str) -> set[str]:
    with sink.lock:
        return {name for ns, name in sink.state.get(kind, {}) if ns == namespace}


def test_paged_list_then_watch_keeps_the_sink_converged(cluster, ns, start_source):
    for i in range(5):
        cluster.core.create_namespaced_pod(ns.name, pod(f"p{i}"))
    sink = RecordingSink()
    source = start_source(sink, [PODS], page_size=2)
    wait(lambda: source.synced, "initial sync")
    assert mine(sink, PODS, ns.name) == {f"p{i}" for i in range(5)}
    listed = sink.state[PODS][(ns.name, "p3")]
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "Pod")          # filled in for list items
    assert "managedFields" not in listed["metadata"]

    cluster.core.create_namespaced_pod(ns.name, pod("p9"))
    cluster.core.patch_namespaced_pod("p0", ns.name, {"metadata": {"labels": {"seen": "yes"}}})
    cluster.core.delete_namespaced_pod("p1", ns.name, grace_period_seconds=0)
    wait(lambda: mine(sink, PODS, ns.name) == {"p0", "p2", "p3", "p4", "p9"}
         and sink.state[PODS][(ns.name, "p0")]["metadata"].get("labels") == {"seen": "yes"}, "watch events")
    assert sink.synced_calls == 1


def test_a_crd_installed_later_is_picked_up_and_its_removal_drops_its_objects(cluster, ns, start_source):
    sink = RecordingSink()
    source = start_source(sink, [NODES, WIDGETS])
    wait(lambda: source.synced, "initial sync without the CRD")
    assert source.status()["widgets.e2e.example.com"].state == "absent"
    cluster.apply([{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                    "metadata": {"name": "widgets.e2e.example.com"},
                    "spec": {"group": "e2e.example.com", "scope": "Namespaced",
                             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                                 "openAPIV3Schema": {"type": "object",
                                                     "x-kubernetes-preserve-unknown-fields": True}}}]}}])
    try:
        cluster.plane.kubectl("wait", "--for=condition=Established", "crd/widgets.e2e.example.com",
                              "--timeout=30s")
        ns.apply({"apiVersion": "e2e.example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}})
        wait(lambda: mine(sink, WIDGETS, ns.name) == {"w1"}, "the new kind listed")
        ns.apply({"apiVersion": "e2e.example.com/v1", "kind": "Widget", "metadata": {"name": "w2"}})
        wait(lambda: mine(sink, WIDGETS, ns.name) == {"w1", "w2"}, "the new kind watched")
    finally:
        cluster.plane.kubectl("delete", "crd", "widgets.e2e.example.com", "--wait=true", check=False)
    wait(lambda: mine(sink, WIDGETS, ns.name) == set(), "objects dropped with their CRD")
    assert sink.synced_calls == 1


def test_priority_classes_are_listed_and_watched(cluster, ns, start_source):
    low, high = f"{ns.name}-low", f"{ns.name}-high"
    cluster.apply([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": low},
                    "value": 10}])
    try:
        sink = RecordingSink()
        source = start_source(sink, [CLASSES])
        wait(lambda: source.synced, "initial sync")
        assert sink.state[CLASSES][("", low)]["value"] == 10
        cluster.apply([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": high},
                        "value": 100000}])
        wait(lambda: ("", high) in sink.state[CLASSES], "a class created later")
    finally:
        cluster.plane.kubectl("delete", "priorityclass", low, high, "--ignore-not-found", check=False)


def test_the_served_version_of_resource_k8s_io_is_discovered_and_watched(cluster, ns, start_source):
    """v1.36 serves resource.k8s.io/v1 (GA since 1.34): it is the version listed, v1beta2 only its fallback."""
    sink = RecordingSink()
    source = start_source(sink, list(DRA_KINDS))
    wait(lambda: source.synced, "initial sync")
    for plural in ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates"):
        assert source.status()[f"{plural}.resource.k8s.io"].served_version == "resource.k8s.io/v1"
    claims = next(k for k in DRA_KINDS if k.plural == "resourceclaims" and k.version == "v1")
    ns.apply({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "watched"},
              "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "none"}}]}}})
    wait(lambda: mine(sink, claims, ns.name) == {"watched"}, "a claim created after the list")
