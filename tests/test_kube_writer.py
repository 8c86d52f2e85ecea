"""KubeWriter against the fake API server: Binding 201/409, annotation patch, Eviction 201/429, Events."""
from __future__ import annotations

import threading

import pytest
from fakekube import fake_kube, wait_until  # noqa: F401 - fake_kube is a fixture

from app.kube.client import KubeApi, KubeApiError, build_api_client
from app.kube.sync import KubeSource
from app.kube.writer import EVENT_MESSAGE_LIMIT, KubeWriter
from app.ports import WATCHED_KINDS, BindConflict, ClusterWriter, EvictionRefused


@pytest.fixture
def writer(fake_kube) -> KubeWriter:
    return KubeWriter(KubeApi(build_api_client(host=fake_kube.url)), instance="replica-0")


def make_pod(fake, name: str, namespace: str = "team-a", **metadata) -> dict:
    return fake.create({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": name, "namespace": namespace, **metadata},
                        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})


def stored_pod(fake, name: str, namespace: str = "team-a") -> dict | None:
    return fake.get("v1", "Pod", name, namespace)


def events(fake) -> list[dict]:
    return [e for ns_events in [fake.list(fake.resource("", "v1", "events"))[1]] for e in ns_events]


def test_kube_writer_satisfies_the_port(writer):
    assert isinstance(writer, KubeWriter)
    port_methods = {m for m in vars(ClusterWriter) if not m.startswith("_")}
    assert port_methods <= set(dir(writer))


def test_bind_sets_the_node_and_scheduled_condition(fake_kube, writer):
    pod = make_pod(fake_kube, "worker-0")
    writer.bind("team-a", "worker-0", pod["metadata"]["uid"], "node-3")
    bound = stored_pod(fake_kube, "worker-0")
    assert bound["spec"]["nodeName"] == "node-3"
    assert {"type": "PodScheduled", "status": "True"}.items() <= bound["status"]["conditions"][0].items()


def test_bind_to_an_already_bound_pod_is_a_conflict_naming_the_node(fake_kube, writer):
    pod = make_pod(fake_kube, "worker-0")
    writer.bind("team-a", "worker-0", pod["metadata"]["uid"], "node-3")
    with pytest.raises(BindConflict) as conflict:
        writer.bind("team-a", "worker-0", pod["metadata"]["uid"], "node-5")
    assert conflict.value.node == "node-3"
    assert stored_pod(fake_kube, "worker-0")["spec"]["nodeName"] == "node-3"


def test_bind_with_a_stale_uid_is_a_conflict_and_changes_nothing(fake_kube, writer):
    make_pod(fake_kube, "worker-0")
    with pytest.raises(BindConflict) as conflict:
        writer.bind("team-a", "worker-0", "uid-of-a-deleted-pod", "node-3")
    assert conflict.value.node is None
    assert "Precondition failed" in str(conflict.value)
    assert "nodeName" not in stored_pod(fake_kube, "worker-0")["spec"]


def test_bind_of_a_missing_pod_raises_the_api_error(fake_kube, writer):
    with pytest.raises(KubeApiError) as error:
        writer.bind("team-a", "ghost", "uid", "node-3")
    assert error.value.status == 404


def test_concurrent_binds_of_one_pod_have_exactly_one_winner(fake_kube, writer):
    uid = make_pod(fake_kube, "worker-0")["metadata"]["uid"]
    outcomes: dict[str, object] = {}

    def bind(node: str) -> None:
        try:
            writer.bind("team-a", "worker-0", uid, node)
            outcomes[node] = "bound"
        except BindConflict as conflict:
            outcomes[node] = conflict

    threads = [threading.Thread(target=bind, args=(f"node-{i}",)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [node for node, outcome in outcomes.items() if outcome == "bound"]
    assert len(winners) == 1 and len(outcomes) == 12
    assert stored_pod(fake_kube, "worker-0")["spec"]["nodeName"] == winners[0]
    assert all(o.node == winners[0] for o in outcomes.values() if isinstance(o, BindConflict))


def test_bind_is_seen_by_the_sync_as_a_modified_pod(fake_kube, writer):
    pods_kind = next(k for k in WATCHED_KINDS if k.plural == "pods")
    seen: list[tuple[str, str | None]] = []

    class Sink:
        def replace(self, kind, objects): pass
        def synced(self): pass
        def apply(self, kind, event, obj):
            if kind == pods_kind:
                seen.append((event, obj.get("spec", {}).get("nodeName")))

    uid = make_pod(fake_kube, "worker-0")["metadata"]["uid"]
    source = KubeSource(KubeApi(build_api_client(host=fake_kube.url)), Sink(), [pods_kind], watch_timeout=5)
    source.start()
    try:
        wait_until(lambda: source.synced, what="sync")
        writer.bind("team-a", "worker-0", uid, "node-1")
        wait_until(lambda: ("MODIFIED", "node-1") in seen, what="MODIFIED event with the node")
    finally:
        source.stop()


def test_annotate_pod_merges_annotations(fake_kube, writer):
    make_pod(fake_kube, "worker-0", annotations={"keep": "me"}, labels={"app": "x"})
    writer.annotate_pod("team-a", "worker-0", {"tas.io/rack": "r-3", "tas.io/block": "b-1"})
    writer.annotate_pod("team-a", "worker-0", {"tas.io/rack": "r-4"})
    metadata = stored_pod(fake_kube, "worker-0")["metadata"]
    assert metadata["annotations"] == {"keep": "me", "tas.io/rack": "r-4", "tas.io/block": "b-1"}
    assert metadata["labels"] == {"app": "x"}


def test_annotate_missing_pod_raises(fake_kube, writer):
    with pytest.raises(KubeApiError) as error:
        writer.annotate_pod("team-a", "ghost", {"a": "b"})
    assert error.value.status == 404


def test_evict_deletes_the_pod(fake_kube, writer):
    uid = make_pod(fake_kube, "victim")["metadata"]["uid"]
    writer.evict("team-a", "victim", uid)
    assert stored_pod(fake_kube, "victim") is None


def test_evict_refused_by_a_disruption_budget(fake_kube, writer):
    uid = make_pod(fake_kube, "protected")["metadata"]["uid"]
    fake_kube.refuse_eviction.add(("team-a", "protected"))
    with pytest.raises(EvictionRefused) as refused:
        writer.evict("team-a", "protected", uid)
    assert "disruption budget" in str(refused.value) and "team-a/protected" in str(refused.value)
    assert stored_pod(fake_kube, "protected") is not None


def test_evict_of_a_gone_or_replaced_pod_is_not_an_error(fake_kube, writer):
    writer.evict("team-a", "never-existed")
    make_pod(fake_kube, "reused-name")
    writer.evict("team-a", "reused-name", uid="uid-of-the-old-pod")
    assert stored_pod(fake_kube, "reused-name") is not None     # the new pod under that name is left alone


def test_event_records_a_core_v1_event(fake_kube, writer):
    pod = make_pod(fake_kube, "worker-0")
    writer.event(pod, "GangUnschedulable", "needs one block: best block b-2 has room for 12", "Warning")
    [event] = events(fake_kube)
    assert event["metadata"]["namespace"] == "team-a"
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "worker-0",
                                       "namespace": "team-a", "uid": pod["metadata"]["uid"]}
    assert (event["reason"], event["type"], event["count"]) == ("GangUnschedulable", "Warning", 1)
    assert event["source"] == {"component": "tas-extender"} and event["reportingInstance"] == "replica-0"


def test_repeated_events_bump_one_count(fake_kube, writer):
    pod = make_pod(fake_kube, "worker-0")
    for _ in range(3):
        writer.event(pod, "Waiting", "waits for 4 victims")
    writer.event(pod, "Waiting", "waits for 3 victims")
    counts = sorted((e["message"], e["count"]) for e in events(fake_kube))
    assert counts == [("waits for 3 victims", 1), ("waits for 4 victims", 3)]


def test_event_on_a_node_goes_to_the_default_namespace_and_is_truncated(fake_kube, writer):
    node = fake_kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}})
    writer.event(node, "Replanned", "x" * 5000)
    [event] = events(fake_kube)
    assert event["metadata"]["namespace"] == "default"
    assert event["involvedObject"]["kind"] == "Node" and "namespace" not in event["involvedObject"]
    assert len(event["message"]) == EVENT_MESSAGE_LIMIT


def test_event_never_raises(fake_kube, writer):
    pod = make_pod(fake_kube, "worker-0")
    fake_kube.fail("POST", "/api/v1/namespaces/team-a/events", times=1, code=500)
    writer.event(pod, "Planned", "slot 0 on node-1")          # the server fails: logged, not raised
    writer.event({"metadata": {}}, "Odd", "an object without a name")
    dead = KubeWriter(KubeApi(build_api_client(host="http://127.0.0.1:9"), timeout=1))
    dead.event(pod, "Planned", "nobody listens")
    assert events(fake_kube) == []
    writer.event(pod, "Planned", "slot 0 on node-1")          # the server works again
    assert [e["reason"] for e in events(fake_kube)] == ["Planned"]
