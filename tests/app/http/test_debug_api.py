"""The debug API the /ui page and people read: plans and topologies as clean JSON."""
from __future__ import annotations

import pytest

from service_helpers import GPU, filter_, indexed_job, job_pods, make_client, plain_pod, schedule, service


def test_plans_list_and_detail():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    assert client.get("/debug/plans").json()["plans"] == []
    schedule(client, job_pods(job)[0])
    listing = client.get("/debug/plans").json()
    assert listing["counts"] == {"pending": 0, "planned": 1, "bound": 0, "refused": 0}
    assert listing["reservations"] == 7 and listing["settings"]["strategy"] == "binpack"
    summary = listing["plans"][0]
    assert summary["gang"] == "team-a/pg-llama-uid-llama" and summary["kind"] == "Job" and "slots" not in summary
    detail = client.get("/debug/plans/team-a/pg-llama-uid-llama").json()
    assert detail["topology"] == "default" and detail["pods"] == 8
    assert {s["status"] for s in detail["slots"]} == {"planned", "bound"}
    bound = [s for s in detail["slots"] if s["status"] == "bound"]
    assert bound == [{"slot": "job-0", "role": "job", "index": 0, "node": bound[0]["node"], "status": "bound",
                      "pod": "team-a/llama-0", "reserved": False, "group": "job-0"}]
    groups = {g["group"]: g for g in detail["groups"]}
    assert groups["job-0"]["level"] == "rack" and groups["job-0"]["domain"].count("/") == 2
    missing = client.get("/debug/plans/team-a/nothing")
    assert missing.status_code == 404 and "team-a/pg-llama-uid-llama" in missing.json()["detail"]


def test_topology_listing():
    client = make_client()
    body = client.get("/debug/topology").json()
    names = [t["name"] for t in body["topologies"]]
    assert names == ["default", "kueue-default"]
    default = body["topologies"][0]
    assert [l["display"] for l in default["levels"]] == ["zone", "block", "rack", "host"]
    cluster = service(client).cluster
    tree = cluster.topologies["default"]
    assert [l["domains"] for l in default["levels"]] == [tree.domain_count(i) for i in range(tree.depth)]
    assert default["nodes"] == len(cluster.nodes) and GPU in body["resources"]


def test_topology_tree_has_capacity_usage_and_reservations_per_domain():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    filter_(client, job_pods(job)[0])
    body = client.get("/debug/topology/default", params={"resource": GPU}).json()
    assert body["resources"] == [GPU] and body["levels"] == ["zone", "block", "rack", "host"]
    zones = body["domains"]
    assert [z["value"] for z in zones] == ["zone-a", "zone-b"]
    cluster = service(client).cluster
    assert sum(z["allocatable"][GPU] for z in zones) == int(cluster.capacity.allocatable[:, cluster.resources.column[GPU]].sum())
    assert sum(z["reserved"][GPU] for z in zones) == 32
    for zone in zones:       # free is usable free; NotReady node-16 and tainted node-24 hold the unusable part
        assert zone["free"][GPU] + zone["unusable"][GPU] == \
            zone["allocatable"][GPU] - zone["used"][GPU] - zone["reserved"][GPU]
        assert zone["used"][GPU] == sum(b["used"][GPU] for b in zone["children"])
    nodes = [n for z in zones for b in z["children"] for r in b["children"] for h in r["children"] for n in h["nodes"]]
    assert len(nodes) == len(cluster.nodes)
    node16 = next(n for n in nodes if n["node"] == "node-16")
    assert node16["ready"] is False
    node24 = next(n for n in nodes if n["node"] == "node-24")
    assert node24["taints"] == ["maintenance=nic-firmware:NoSchedule"]
    for node in (node16, node24):
        assert node["free"][GPU] == 0 and node["unusable"][GPU] == 8
    assert sum(z["unusable"][GPU] for z in zones) == 16
    reserved = [n for n in nodes if n["reservations"]]
    assert sum(n["reserved"][GPU] for n in reserved) == 32
    assert all(r.startswith("team-a/pg-llama-uid-llama#job-") for n in reserved for r in n["reservations"])
    assert body["totals"]["reserved"][GPU] == 32


def test_topology_errors_name_valid_values():
    client = make_client()
    unknown = client.get("/debug/topology/nope")
    assert unknown.status_code == 404 and "default, kueue-default" in unknown.json()["detail"]
    bad = client.get("/debug/topology/default", params={"resource": "tpu"})
    assert bad.status_code == 400 and "nvidia.com/gpu" in bad.json()["detail"]


def test_objects_can_be_added_in_standalone_mode():
    client = make_client()
    job = indexed_job("llama", pods=8, gpus=4)
    import yaml
    response = client.post("/debug/objects", content=yaml.safe_dump(job), headers={"content-type": "application/yaml"})
    assert response.json() == {"applied": ["Job team-a/llama"]}
    answer = filter_(client, job_pods(job)[0])
    assert len(answer["NodeNames"]) == 1
    assert client.get("/debug/plans").json()["counts"]["planned"] == 1
    bad = client.post("/debug/objects", content=b"kind: [")
    assert bad.status_code == 400 and "not valid YAML or JSON" in bad.json()["detail"]


# --- issue 16 item 1: the tree in pieces, 304 while unchanged, search -----------------------------------

def test_topology_overview_cuts_at_a_depth_with_heat_strips_and_expands_one_domain():
    client = make_client()
    body = client.get("/debug/topology/default", params={"depth": 2, "resource": GPU}).json()
    block = body["domains"][0]["children"][0]
    assert "children" not in block and block["collapsed"] == 2
    assert [r["value"] for r in block["strip"]] == ["a-block-1-rack-1", "a-block-1-rack-2"]
    assert block["strip"][0]["free"][GPU] == 24                       # node-01/02 half used
    opened = client.get("/debug/topology/default", params={"domain": block["id"], "depth": 2}).json()["domains"]
    assert [d["id"] for d in opened] == [block["id"]]
    assert [r["collapsed"] for r in opened[0]["children"]] == [4, 4]
    missing = client.get("/debug/topology/default", params={"domain": "zone-x"})
    assert missing.status_code == 404 and "domain='zone-x'" in missing.json()["detail"]


def test_an_unchanged_tree_is_a_304_and_a_change_gives_a_new_etag():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    first = client.get("/debug/topology/default", params={"depth": 2})
    etag = first.headers["etag"]
    assert client.get("/debug/topology/default", params={"depth": 2},
                      headers={"If-None-Match": etag}).status_code == 304
    filter_(client, job_pods(job)[0])                                  # reserves 32 GPUs
    changed = client.get("/debug/topology/default", params={"depth": 2}, headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag
    assert changed.json()["totals"]["reserved"][GPU] == 32


def test_search_finds_nodes_with_their_domain_path_gangs_by_workload_and_pods():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    filter_(client, job_pods(job)[0])
    found = client.get("/debug/search", params={"q": "node-13", "topology": "default"}).json()
    path = ["zone-a", "zone-a/a-block-2", "zone-a/a-block-2/a-block-2-rack-2", "zone-a/a-block-2/a-block-2-rack-2/node-13"]
    assert found["nodes"] == [{"node": "node-13", "path": path, "paths": {"default": path}}]
    assert [g["workload"] for g in client.get("/debug/search", params={"q": "llama"}).json()["gangs"]] == ["llama"]
    assert [g["gang"] for g in client.get("/debug/search", params={"q": "team-a"}).json()["gangs"]] == \
        ["team-a/pg-llama-uid-llama"]
    pods = client.get("/debug/search", params={"q": "research/"}).json()["pods"]
    assert pods and all(p["node"] for p in pods)
    assert client.get("/debug/search", params={"q": ""}).status_code == 400


def test_search_without_a_topology_gives_the_paths_in_every_topology_and_an_unknown_one_is_a_404():
    client = make_client()
    for params in ({"q": "node-13"}, {"q": "node-13", "topology": ""}):
        node = client.get("/debug/search", params=params).json()["nodes"][0]
        assert node["paths"]["default"][-1] == "zone-a/a-block-2/a-block-2-rack-2/node-13"
        assert node["paths"]["kueue-default"][-1] == "a-block-2/a-block-2-rack-2/node-13"
        assert node["path"] == node["paths"]["default"]
    pod = client.get("/debug/search", params={"q": "inference"}).json()["pods"][0]
    assert pod["path"] and pod["paths"]["default"][-1].endswith(pod["node"])
    unknown = client.get("/debug/search", params={"q": "node", "topology": "nope"})
    assert unknown.status_code == 404 and "known topologies: default, kueue-default" in unknown.json()["detail"]


def test_search_finds_domains_at_every_level_with_their_path():
    """Issue 40: `?q=z3-block-11` found nothing; a domain of every level is found by its own name."""
    client = make_client()
    found = client.get("/debug/search", params={"q": "a-block-2", "topology": "default"}).json()["domains"]
    assert {d["domain"] for d in found} == {"zone-a/a-block-2", "zone-a/a-block-2/a-block-2-rack-1",
                                            "zone-a/a-block-2/a-block-2-rack-2"}
    block = next(d for d in found if d["domain"] == "zone-a/a-block-2")
    assert block == {"domain": "zone-a/a-block-2", "level": "block", "topology": "default",
                     "path": ["zone-a", "zone-a/a-block-2"]}
    zones = client.get("/debug/search", params={"q": "zone-b"}).json()["domains"]
    assert [(d["domain"], d["level"]) for d in zones] == [("zone-b", "zone")]
    everywhere = client.get("/debug/search", params={"q": "a-block-1-rack-2"}).json()["domains"]
    assert {d["topology"] for d in everywhere} == {"default", "kueue-default"}
    hosts = client.get("/debug/search", params={"q": "node-13"}).json()
    assert hosts["domains"] == [] and [n["node"] for n in hosts["nodes"]] == ["node-13"]   # a host is a node
    assert len(client.get("/debug/search", params={"q": "rack", "limit": 3}).json()["domains"]) == 3


@pytest.mark.parametrize("path, params, sentence", [
    ("/debug/topology/default", {"depth": "abc"}, "depth='abc' is not valid: depth must be a whole number of at least 1."),
    ("/debug/topology/default", {"depth": "0"}, "depth='0' is not valid: depth must be a whole number of at least 1."),
    ("/debug/topology", {"below_priority": "high"},
     "below_priority='high' is not valid: below_priority must be a whole number."),
    ("/debug/topology", {"domains": "maybe"}, "domains='maybe' is not valid: domains must be true or false."),
    ("/debug/search", {"q": ""}, "q='' is not valid: q must be a text of at least 1 character."),
    ("/debug/search", {}, "q is required: give a text of at least 1 character."),
    ("/debug/search", {"q": "x", "limit": "500"}, "limit='500' is not valid: limit must be a whole number from 1 to 200."),
])
def test_a_bad_debug_parameter_is_one_sentence_naming_it_and_its_valid_values(path, params, sentence):
    """Issue 40: these answered FastAPI's raw 422 list of errors."""
    answer = make_client().get(path, params=params)
    assert answer.status_code == 400
    assert answer.json() == {"detail": sentence}


BAD_OBJECTS = [
    ({"kind": "Node", "metadata": {"name": 5}}, 422, "Node 5: metadata.name must be a string, got 5"),
    ({"kind": "Node", "metadata": {"name": "nn"}, "status": "x"}, 422, 'Node nn: status must be a map, got "x"'),
    ({"kind": "Node", "metadata": {"name": "nn"}, "spec": {"taints": "x"}}, 422, 'spec.taints must be a list, got "x"'),
    ({"kind": "Node", "metadata": {"name": "nn"}, "status": {"allocatable": {GPU: "100Ei"}}}, 422,
     "quantity '100Ei' is too large"),
    ({"kind": "Pod", "metadata": {"name": "p"}, "status": "x"}, 400, 'Pod p: status must be a map, got "x"'),
    ({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"tolerations": "x"}}, 400, 'spec.tolerations must be a list, got "x"'),
    ({"kind": 5, "metadata": {"name": "k"}}, 400, "object 'kind' must be a non-empty string"),
    ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "resourceVersion": []}}, 400,
     "Job j: metadata.resourceVersion must be a string, got []"),
    ({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "annotations": {"kai.scheduler/topology": []}}},
     400, 'Job j: metadata.annotations["kai.scheduler/topology"] must be a string, got []'),
]


def _broken(job: dict, path: list, value) -> dict:
    parent = job
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return job


TEMPLATE = ["spec", "template", "spec"]


@pytest.mark.parametrize("path, value, message", [
    (TEMPLATE, "x", "Job team-a/llama: spec.template.spec='x' is invalid; expected a mapping"),
    ([*TEMPLATE, "containers"], 5, "spec.template.spec.containers=5 is invalid; expected a list of containers"),
    ([*TEMPLATE, "containers", 0, "resources", "limits", GPU], "x",
     "spec.template.spec.containers[0].resources (nvidia.com/gpu): quantity 'x' is not a number"),
])
def test_a_workload_whose_template_cannot_be_read_refuses_its_pods_naming_the_field(path, value, message):
    """Workloads of custom kinds reach the service as their CRD's schema lets them: a pod template the
    planner cannot read refuses the gang's pods (no eviction helps), never an internal error."""
    job = indexed_job("llama", pods=2, gpus=1)
    pods = job_pods(job)
    client = make_client(_broken(job, path, value))
    answer = filter_(client, pods[0], service(client).cluster.node_names[:2])
    assert answer["NodeNames"] == [] and answer["Error"] == ""
    assert all(message in reason for reason in answer["FailedAndUnresolvableNodes"].values()), answer


@pytest.mark.parametrize("obj, status, message", BAD_OBJECTS)
def test_a_malformed_object_is_refused_and_the_service_keeps_scheduling(obj, status, message):
    client = make_client()
    answer = client.post("/debug/objects", json=obj)
    assert answer.status_code == status and message in answer.json()["detail"]
    node = service(client).cluster.node_names[0]
    assert filter_(client, plain_pod("after"), [node])["NodeNames"] == [node]
    assert client.get("/debug/topology").status_code == 200


def test_the_debug_api_is_gzipped_when_the_client_accepts_it_and_the_extender_verbs_are_not():
    client = make_client()
    for path in ("/debug/topology/default", "/debug/topology", "/ui", "/metrics"):     # answers above 500 bytes
        zipped = client.get(path, headers={"accept-encoding": "gzip"})
        assert zipped.status_code == 200 and zipped.headers.get("content-encoding") == "gzip", path
        plain = client.get(path, headers={"accept-encoding": "identity"})
        assert "content-encoding" not in plain.headers and len(plain.content) > 500, path
    tree = client.get("/debug/topology/default", headers={"accept-encoding": "gzip"})
    assert tree.json()["name"] == "default"                      # decoded by the client, same body
    unchanged = client.get("/debug/topology/default", headers={"accept-encoding": "gzip",
                                                               "if-none-match": tree.headers["etag"]})
    assert unchanged.status_code == 304
    nodes = service(client).cluster.node_names
    answer = client.post("/scheduler/filter", headers={"accept-encoding": "gzip"},
                         json={"Pod": plain_pod("p"), "NodeNames": nodes})
    assert answer.status_code == 200 and "content-encoding" not in answer.headers
