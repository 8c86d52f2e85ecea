"""KubeWriter against the fake API server, for what the real one cannot be made to do on demand (an
Events endpoint that fails, a server that is down) and what needs no cluster. Binding, conflicts, Eviction
with a PodDisruptionBudget and Events are tested against the real API server in
tests/e2e/test_e2e_kube_adapters.py."""
from __future__ import annotations


import pytest
from fakekube import fake_kube, wait_until  # noqa: F401 - fake_kube is a fixture

from app.kube.client import KubeApi, KubeApiError, build_api_client
from app.kube.sync import KubeSource
from app.kube.writer import EVENT_MESSAGE_LIMIT, KubeWriter
from app.ports import WATCHED_KINDS, ClusterWriter


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


def test_a_request_leaves_in_one_write_head_and_body_together(fake_kube, writer, monkeypatch):
    """urllib3 sends a request's head and its body in two writes (over TLS two records); the service's
    connections hold them and write once (app/kube/one_write.py). The request itself is unchanged."""
    import socket
    make_pod(fake_kube, "one-write")
    writes = []
    original = socket.socket.sendall

    def sendall(sock, data, *args):
        writes.append(bytes(data))
        return original(sock, data, *args)
    monkeypatch.setattr(socket.socket, "sendall", sendall)
    writer.bind("team-a", "one-write", "", "node-1", {"tas-extender.io/gang": "team-a/g"})
    assert len(writes) == 1
    head, _, body = writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /api/v1/namespaces/team-a/pods/one-write/binding HTTP/1.1")
    assert b'"kind":"Binding"' in body and f"content-length: {len(body)}".encode() in head.lower()
    assert (stored_pod(fake_kube, "one-write") or {}).get("spec", {}).get("nodeName") == "node-1"
