"""The fake API server itself: the official client's typed calls and the real wire shapes work against it."""
from __future__ import annotations

import threading

import pytest
from fakekube import fake_kube, wait_until  # noqa: F401 - fake_kube is a fixture
from kubernetes import client, watch

from app.kube.client import KubeApi, KubeApiError, build_api_client


@pytest.fixture
def api(fake_kube) -> KubeApi:
    return KubeApi(build_api_client(host=fake_kube.url))


def seed(fake) -> None:
    for i in range(5):
        fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}", "labels": {"rack": "r1"}}})
    fake.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"},
                 "spec": {"containers": [{"name": "c", "image": "busybox"}]}})


def test_official_typed_client_reads_lists_and_objects(fake_kube):
    seed(fake_kube)
    core = client.CoreV1Api(build_api_client(host=fake_kube.url))
    nodes = core.list_node()
    assert [n.metadata.name for n in nodes.items] == [f"n{i}" for i in range(5)]
    assert nodes.metadata.resource_version == str(fake_kube.resource_version)
    pods = core.list_namespaced_pod("team-a")
    assert [p.metadata.name for p in pods.items] == ["p"]
    assert core.read_namespaced_pod("p", "team-a").spec.containers[0].image == "busybox"
    with pytest.raises(client.ApiException) as missing:
        core.read_namespaced_pod("ghost", "team-a")
    assert missing.value.status == 404


def test_official_watch_streams_events_from_a_resource_version(fake_kube):
    seed(fake_kube)
    api_client = build_api_client(host=fake_kube.url)
    core = client.CoreV1Api(api_client)
    start = core.list_node().metadata.resource_version
    fake_kube.update("v1", "Node", "n1", {"metadata": {"labels": {"rack": "r2"}}})
    fake_kube.remove("v1", "Node", "n2")
    seen = []
    for event in watch.Watch().stream(core.list_node, resource_version=start, timeout_seconds=1):
        seen.append((event["type"], event["object"].metadata.name))
    assert seen == [("MODIFIED", "n1"), ("DELETED", "n2")]


def test_list_shape_and_pagination(fake_kube, api):
    seed(fake_kube)
    first = api.request("GET", "/api/v1/nodes", query=[("limit", "2")])
    assert (first["kind"], first["apiVersion"]) == ("NodeList", "v1")
    assert "kind" not in first["items"][0]          # built-in list items come without TypeMeta
    names = [i["metadata"]["name"] for i in first["items"]]
    token = first["metadata"]["continue"]
    while token:
        page = api.request("GET", "/api/v1/nodes", query=[("limit", "2"), ("continue", token)])
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        names += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue")
    assert names == [f"n{i}" for i in range(5)]


def test_expired_continue_token_is_410(fake_kube, api):
    seed(fake_kube)
    token = api.request("GET", "/api/v1/nodes", query=[("limit", "2")])["metadata"]["continue"]
    fake_kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "later"}})
    fake_kube.compact()
    with pytest.raises(KubeApiError) as gone:
        api.request("GET", "/api/v1/nodes", query=[("limit", "2"), ("continue", token)])
    assert (gone.value.status, gone.value.reason) == (410, "Expired")


def test_watch_from_a_compacted_version_is_an_error_event_with_status_410(fake_kube, api):
    seed(fake_kube)
    old = fake_kube.resource_version
    fake_kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "later"}})
    fake_kube.compact()
    [event] = list(api.stream("/api/v1/nodes", [("watch", "1"), ("resourceVersion", str(old))], 10))
    assert event["type"] == "ERROR"
    assert {k: event["object"][k] for k in ("kind", "status", "reason", "code")} == \
        {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410}
    assert event["object"]["message"].startswith(f"too old resource version: {old}")


def test_open_watches_end_with_410_on_compaction(fake_kube, api):
    events = []
    opened = threading.Event()

    def watch_nodes():
        for event in api.stream("/api/v1/nodes", [("watch", "1"), ("resourceVersion", "0")], 60):
            events.append(event)
            opened.set()

    fake_kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0"}})
    reader = threading.Thread(target=watch_nodes)
    reader.start()
    assert opened.wait(30), "the watch never opened"
    fake_kube.compact()
    reader.join(30)
    assert [e["type"] for e in events] == ["ADDED", "ERROR"]     # rv 0: the current state as ADDED first
    assert events[-1]["object"]["code"] == 410


def test_absent_apis_are_404(fake_kube, api):
    with pytest.raises(KubeApiError) as unknown_group:
        api.request("GET", "/apis/kubeflow.org/v1/pytorchjobs")
    assert unknown_group.value.status == 404
    fake_kube.install_crd("kubeflow.org", "v1", "tfjobs", "TFJob")
    with pytest.raises(KubeApiError) as unknown_plural:
        api.request("GET", "/apis/kubeflow.org/v1/pytorchjobs")
    assert (unknown_plural.value.status, unknown_plural.value.reason) == (404, "NotFound")
    assert api.request("GET", "/apis/kubeflow.org/v1/namespaces/team-a/tfjobs")["items"] == []


def test_custom_objects_through_the_official_client(fake_kube):
    fake_kube.install_crd("kai.scheduler", "v1alpha1", "topologies", "Topology", namespaced=False)
    fake_kube.create({"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "t"},
                      "spec": {"levels": [{"nodeLabel": "rack"}]}})
    custom = client.CustomObjectsApi(build_api_client(host=fake_kube.url))
    listed = custom.list_cluster_custom_object("kai.scheduler", "v1alpha1", "topologies")
    assert listed["kind"] == "TopologyList" and listed["items"][0]["kind"] == "Topology"


def test_put_with_a_stale_resource_version_is_a_conflict(fake_kube, api):
    path = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
    created = api.request("POST", path, body={"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                              "metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}})
    updated = api.request("PUT", f"{path}/l", body={**created, "spec": {"holderIdentity": "b"}})
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    with pytest.raises(KubeApiError) as conflict:
        api.request("PUT", f"{path}/l", body={**created, "spec": {"holderIdentity": "c"}})
    assert (conflict.value.status, conflict.value.reason) == (409, "Conflict")
    with pytest.raises(KubeApiError) as exists:
        api.request("POST", path, body=created)
    assert (exists.value.status, exists.value.reason) == (409, "AlreadyExists")
    assert fake_kube.get("coordination.k8s.io/v1", "Lease", "l", "ns")["spec"]["holderIdentity"] == "b"


def test_patch_needs_a_merge_patch_content_type(fake_kube, api):
    seed(fake_kube)
    with pytest.raises(KubeApiError) as unsupported:
        api.request("PATCH", "/api/v1/nodes/n0", body=[{"op": "add", "path": "/x", "value": 1}],
                    content_type="application/json-patch+json")
    assert unsupported.value.status == 415
    patched = api.request("PATCH", "/api/v1/nodes/n0", body={"metadata": {"labels": {"rack": None, "z": "1"}}},
                          content_type="application/strategic-merge-patch+json")
    assert patched["metadata"]["labels"] == {"z": "1"}


def test_binding_validates_its_body(fake_kube, api):
    seed(fake_kube)
    path = "/api/v1/namespaces/team-a/pods/p/binding"
    with pytest.raises(KubeApiError) as mismatch:
        api.request("POST", path, body={"metadata": {"name": "other"}, "target": {"name": "n0"}})
    assert mismatch.value.status == 400
    with pytest.raises(KubeApiError) as no_target:
        api.request("POST", path, body={"metadata": {"name": "p"}, "target": {}})
    assert no_target.value.status == 422
    answer = api.request("POST", path, body={"metadata": {"name": "p", "annotations": {"a": "b"}},
                                             "target": {"kind": "Node", "name": "n0"}})
    assert (answer["kind"], answer["status"], answer["code"]) == ("Status", "Success", 201)
    pod = fake_kube.get("v1", "Pod", "p", "team-a")
    assert pod["spec"]["nodeName"] == "n0" and pod["metadata"]["annotations"] == {"a": "b"}


def test_resource_versions_are_monotonic_across_kinds(fake_kube, api):
    seed(fake_kube)
    writes = [fake_kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "x"}}),
              fake_kube.update("v1", "Pod", "p", {"metadata": {"labels": {"a": "b"}}}, namespace="team-a"),
              api.request("POST", "/apis/coordination.k8s.io/v1/namespaces/ns/leases",
                          body={"metadata": {"name": "l"}, "spec": {}}),
              fake_kube.remove("v1", "Node", "x")]
    versions = [int(w["metadata"]["resourceVersion"]) for w in writes]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    api.request("POST", "/api/v1/namespaces/team-a/pods/p/binding", body={"target": {"name": "n0"}})
    assert int(fake_kube.get("v1", "Pod", "p", "team-a")["metadata"]["resourceVersion"]) == versions[-1] + 1
    assert fake_kube.resource_version == versions[-1] + 1


def test_an_answer_that_is_not_json_is_a_kube_api_error():
    """A 200 with an HTML page (a proxy in the way) must fail like any other call, not with a decode error."""
    import http.server
    import socketserver

    class Html(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            page = b"<html>proxy login</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    with socketserver.TCPServer(("127.0.0.1", 0), Html) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            api = KubeApi(build_api_client(host=f"http://127.0.0.1:{server.server_address[1]}"))
            with pytest.raises(KubeApiError) as caught:
                api.request("GET", "/api/v1/nodes")
            assert caught.value.reason == "InvalidResponse" and "not JSON" in caught.value.message
        finally:
            server.shutdown()
