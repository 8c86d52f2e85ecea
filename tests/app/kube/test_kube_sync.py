"""KubeSource against the fake API server, for what the real one cannot be made to do on demand: a
watch expiring (410 Gone), lists refused, injected errors and backoff, server-side timeouts with
bookmarks, two versions of a kind served at once, and the convergence property under arbitrary event
orders. Paged list then watch, a CRD installed or removed while watched, and PriorityClasses run against
the real API server in tests/e2e/test_e2e_kube_sync.py."""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from fakekube import FakeKube, fake_kube, serve, wait_until  # noqa: F401 - fake_kube is a fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.kube.client import KubeApi, build_api_client
from app.kube.sync import Backoff, KubeSource
from app.ports import WATCHED_KINDS, WatchedKind



class RecordingSink:
    """An ObjectSink that keeps the current state per kind and counts synced() calls."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state: dict[WatchedKind, dict[tuple[str, str], dict]] = {}
        self.replaced: list[WatchedKind] = []
        self.synced_calls = 0

    @staticmethod
    def _key(obj) -> tuple[str, str]:
        return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]

    def replace(self, kind, objects) -> None:
        with self.lock:
            self.replaced.append(kind)
            self.state[kind] = {self._key(o): o for o in objects}

    def apply(self, kind, event, obj) -> None:
        with self.lock:
            table = self.state.setdefault(kind, {})
            if event == "DELETED":
                table.pop(self._key(obj), None)
            else:
                table[self._key(obj)] = obj

    def synced(self) -> None:
        with self.lock:
            self.synced_calls += 1

    def names(self, kind: WatchedKind) -> set[str]:
        with self.lock:
            return {name for _, name in self.state.get(kind, {})}


def kind(plural: str, group: str = "", version: str | None = None) -> WatchedKind:
    return next(k for k in WATCHED_KINDS if k.plural == plural and k.group == group
                and (version is None or k.version == version))


NODES, PODS = kind("nodes"), kind("pods")


def node(name: str, **labels) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels,
                                                             "managedFields": [{"manager": "kubelet"}]}}


def pod(name: str, namespace: str = "team-a") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


@pytest.fixture
def start_source(fake_kube):
    sources = []

    def start(sink, **options) -> KubeSource:
        options = {"watch_timeout": 1.0, "absent_recheck": 0.2, "backoff_initial": 0.05, "backoff_cap": 0.2,
                   **options}
        source = KubeSource(KubeApi(build_api_client(host=fake_kube.url)), sink, **options)
        sources.append(source)
        source.start()
        return source

    yield start
    for source in sources:
        source.stop()


def test_watch_survives_server_side_timeouts_using_bookmarks(fake_kube, start_source):
    sink = RecordingSink()
    source = start_source(sink, watch_timeout=0.2)
    wait_until(lambda: source.synced, what="initial sync")
    listed_at = int(source.status()["nodes"].resource_version)
    fake_kube.create(pod("elsewhere"))            # moves the global resourceVersion, not the nodes
    # the node watch times out on the server, ends with a BOOKMARK, and is reopened from the bookmark
    wait_until(lambda: int(source.status()["nodes"].resource_version) > listed_at, what="bookmark")
    fake_kube.create(node("late"))
    wait_until(lambda: sink.names(NODES) == {"late"}, what="event after rewatches")
    assert source.status()["nodes"].relists_on_gone == 0
    assert source.status()["nodes"].lists == 1


def test_410_gone_relists_and_converges(fake_kube, start_source):
    for i in range(3):
        fake_kube.create(node(f"n{i}"))
    sink = RecordingSink()
    source = start_source(sink)
    wait_until(lambda: source.synced, what="initial sync")
    lists_before = source.status()["nodes"].lists

    fake_kube.compact()                 # open watches get an ERROR event with a 410 Status
    fake_kube.remove("v1", "Node", "n0")
    fake_kube.create(node("n7"))
    fake_kube.compact()                 # and the relisted version may be too old again
    fake_kube.update("v1", "Node", "n1", {"metadata": {"labels": {"after": "gone"}}})

    wait_until(lambda: sink.names(NODES) == {"n1", "n2", "n7"}
               and sink.state[NODES][("", "n1")]["metadata"].get("labels") == {"after": "gone"},
               what="convergence after 410")
    status = source.status()["nodes"]
    assert status.relists_on_gone >= 1
    assert status.lists > lists_before
    assert sink.synced_calls == 1


def test_410_answered_to_a_list_relists(fake_kube, start_source):
    for i in range(3):
        fake_kube.create(node(f"n{i}"))
    fake_kube.fail("GET", "/api/v1/nodes", times=2, code=410)
    sink = RecordingSink()
    source = start_source(sink)
    wait_until(lambda: source.synced, what="initial sync")
    assert sink.names(NODES) == {"n0", "n1", "n2"}
    assert source.status()["nodes"].relists_on_gone == 2 and source.status()["nodes"].errors == 0


# resource.k8s.io as it is served from Kubernetes 1.34 (v1) and before (v1beta2): the first served wins
DRA_KINDS = tuple(WatchedKind("resource.k8s.io", version, plural, kind_name, namespaced)
                  for plural, kind_name, namespaced in (("deviceclasses", "DeviceClass", False),
                                                         ("resourceslices", "ResourceSlice", False),
                                                         ("resourceclaims", "ResourceClaim", True),
                                                         ("resourceclaimtemplates", "ResourceClaimTemplate", True))
                  for version in ("v1", "v1beta2"))


def test_dra_not_served_is_skipped_with_exactly_one_log_line(fake_kube, start_source, caplog):
    """An API server serving no resource.k8s.io version: its four resources are one line, not four."""
    caplog.set_level(logging.INFO, logger="app.kube.sync")
    source = start_source(RecordingSink(), kinds=(NODES, *DRA_KINDS), absent_recheck=0.1)
    wait_until(lambda: source.synced, what="initial sync without DRA")
    wait_until(lambda: sum(1 for _, p in fake_kube.requests if p == "/apis/resource.k8s.io/v1/resourceslices") >= 3,
               what="re-checks")
    lines = [r.getMessage() for r in caplog.records if "resource.k8s.io" in r.getMessage()
             and "initial sync" not in r.getMessage()]
    assert lines == ["resource.k8s.io: deviceclasses, resourceclaims, resourceclaimtemplates, resourceslices not "
                     "served by this cluster (resource.k8s.io/v1 / resource.k8s.io/v1beta2 not installed?); "
                     "skipped, re-checking every 0.1s"]
    assert {source.status()[f"{p}.resource.k8s.io"].served_version for p in ("deviceclasses", "resourceslices")} \
        == {None}


def test_missing_crds_are_skipped_with_one_log_line_then_picked_up(fake_kube, start_source, caplog):
    caplog.set_level(logging.INFO, logger="app.kube.sync")
    sink = RecordingSink()
    source = start_source(sink, absent_recheck=0.1)
    wait_until(lambda: source.synced, what="initial sync without any CRD")
    assert sink.synced_calls == 1
    pytorch = kind("pytorchjobs", "kubeflow.org")
    assert source.status()["pytorchjobs.kubeflow.org"].state == "absent"
    assert pytorch not in sink.replaced
    wait_until(lambda: sum(1 for m, p in fake_kube.requests if p == "/apis/kubeflow.org/v1/pytorchjobs") >= 3,
               what="re-checks")
    skipped = [r.getMessage() for r in caplog.records if "not served by this cluster" in r.getMessage()
               and r.getMessage().startswith("kubeflow.org:")]
    assert len(skipped) == 1, skipped         # one line for the API group, naming each resource not served
    assert "pytorchjobs" in skipped[0] and "tfjobs" in skipped[0] and "kubeflow.org/v1" in skipped[0]

    fake_kube.install_crd("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
    fake_kube.create({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                      "metadata": {"name": "llama", "namespace": "team-a"}, "spec": {}})
    wait_until(lambda: sink.names(pytorch) == {"llama"}, what="CRD installed later")
    fake_kube.create({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                      "metadata": {"name": "bert", "namespace": "team-b"}, "spec": {}})
    wait_until(lambda: sink.names(pytorch) == {"llama", "bert"}, what="watch on the new CRD")
    assert sink.synced_calls == 1


def test_first_served_version_of_a_resource_wins(fake_kube, start_source):
    v1beta2, v1beta1 = kind("topologies", "kueue.x-k8s.io", "v1beta2"), kind("topologies", "kueue.x-k8s.io", "v1beta1")
    fake_kube.install_crd("kueue.x-k8s.io", "v1beta1", "topologies", "Topology", namespaced=False)
    fake_kube.create({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology", "metadata": {"name": "old"}})
    sink = RecordingSink()
    source = start_source(sink)
    wait_until(lambda: source.synced, what="initial sync")
    assert sink.names(v1beta1) == {"old"} and v1beta2 not in sink.state
    assert source.status()["topologies.kueue.x-k8s.io"].served_version == "kueue.x-k8s.io/v1beta1"


def test_both_versions_served_feeds_only_the_preferred(fake_kube, start_source):
    v1beta2, v1beta1 = kind("topologies", "kueue.x-k8s.io", "v1beta2"), kind("topologies", "kueue.x-k8s.io", "v1beta1")
    for version in ("v1beta1", "v1beta2"):
        fake_kube.install_crd("kueue.x-k8s.io", version, "topologies", "Topology", namespaced=False)
        fake_kube.create({"apiVersion": f"kueue.x-k8s.io/{version}", "kind": "Topology",
                          "metadata": {"name": f"in-{version}"}})
    sink = RecordingSink()
    source = start_source(sink)
    wait_until(lambda: source.synced, what="initial sync")
    assert sink.names(v1beta2) == {"in-v1beta2"} and v1beta1 not in sink.state


def test_errors_back_off_and_the_sync_still_completes(fake_kube, start_source):
    fake_kube.create(node("n0"))
    fake_kube.fail("GET", "/api/v1/nodes", times=4, code=500)
    fake_kube.fail("GET", "/api/v1/pods", times=2, code=503)
    sink = RecordingSink()
    source = start_source(sink)
    wait_until(lambda: source.synced, what="sync despite failures")
    assert sink.names(NODES) == {"n0"}
    assert source.status()["nodes"].errors == 4 and source.status()["pods"].errors == 2
    assert sink.synced_calls == 1


class SlowToSyncSink(RecordingSink):
    def synced(self) -> None:
        time.sleep(0.3)
        super().synced()


def test_source_reports_synced_only_after_the_sink_was_told(fake_kube, start_source):
    fake_kube.create(node("n0"))
    sink = SlowToSyncSink()
    source = start_source(sink)
    wait_until(lambda: source.synced, what="initial sync")
    assert sink.synced_calls == 1


def test_synced_waits_for_every_kind(fake_kube, start_source):
    fake_kube.fail("GET", "/api/v1/pods", times=10_000, code=500)
    sink = RecordingSink()
    source = start_source(sink)
    wait_until(lambda: source.status()["pods"].errors >= 3, what="pods failing")
    assert sink.names(NODES) == set() and NODES in sink.replaced
    assert not source.synced and sink.synced_calls == 0


def test_stop_ends_every_thread_and_feeds_nothing_after(fake_kube):
    sink = RecordingSink()
    source = KubeSource(KubeApi(build_api_client(host=fake_kube.url)), sink, watch_timeout=60, absent_recheck=60)
    source.start()
    wait_until(lambda: source.synced, what="initial sync")
    source.stop(timeout=5)
    assert not any(t.is_alive() for t in source._threads)
    assert all(s.state == "stopped" for s in source.status().values())
    fake_kube.create(node("after-stop"))
    assert "after-stop" not in sink.names(NODES)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux names threads in /proc")
def test_each_sync_thread_carries_its_resource_in_its_os_name(fake_kube):
    """So a benchmark (bench_e2e) tells the watch's CPU apart from the rest of the service's."""
    source = KubeSource(KubeApi(build_api_client(host=fake_kube.url)), RecordingSink(), [NODES, PODS],
                        watch_timeout=60, absent_recheck=60)
    source.start()
    try:
        wait_until(lambda: source.synced, what="initial sync")
        names = {Path(f"/proc/self/task/{t.native_id}/comm").read_text().strip() for t in source._threads}
        assert names == {"sync nodes", "sync pods"}
    finally:
        source.stop(timeout=5)


def test_backoff_grows_to_the_cap_and_resets():
    backoff = Backoff(initial=1.0, cap=8.0, factor=2.0, jitter=0.0)
    assert [backoff.next() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    backoff.reset()
    assert backoff.next() == 1.0


operations = st.lists(st.one_of(
    st.tuples(st.just("create"), st.integers(0, 5)),
    st.tuples(st.just("label"), st.integers(0, 5), st.sampled_from(["a", "b", "c"])),
    st.tuples(st.just("delete"), st.integers(0, 5)),
    st.tuples(st.just("compact"))), max_size=25)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=operations, after=operations)
def test_the_sink_converges_to_the_server_state_whatever_happens(before, after):
    """Property: for any mix of creates, updates, deletes and compactions (410s), before and during the sync,
    the sink ends up with exactly the server's objects at their latest resourceVersion."""
    fake = FakeKube()

    def run(ops) -> None:
        for op in ops:
            name = f"n{op[1]}" if len(op) > 1 else ""
            exists = fake.get("v1", "Node", name) is not None
            if op[0] == "create" and not exists:
                fake.create(node(name))
            elif op[0] == "label" and exists:
                fake.update("v1", "Node", name, {"metadata": {"labels": {"v": op[2]}}})
            elif op[0] == "delete" and exists:
                fake.remove("v1", "Node", name)
            elif op[0] == "compact":
                fake.compact()

    with serve(fake):
        run(before)
        sink = RecordingSink()
        source = KubeSource(KubeApi(build_api_client(host=fake.url)), sink, [NODES], watch_timeout=1,
                            backoff_initial=0.01, backoff_cap=0.05)
        source.start()
        try:
            run(after)

            def server_state():
                return {o["metadata"]["name"]: o["metadata"]["resourceVersion"]
                        for o in fake.list(fake.resource("", "v1", "nodes"))[1]}

            def sink_state():
                with sink.lock:
                    return {name: o["metadata"]["resourceVersion"]
                            for (_, name), o in sink.state.get(NODES, {}).items()}

            wait_until(lambda: source.synced and sink_state() == server_state(), what="convergence")
            assert sink.synced_calls == 1
        finally:
            source.stop()
