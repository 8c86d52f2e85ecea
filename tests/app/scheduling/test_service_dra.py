"""The service on a cluster whose GPUs exist only as DRA devices (issue 38)."""
import copy

import yaml

from service_helpers import filter_, indexed_job, job_pods, make_client, service
from topology.demo import DRA_GPU_CLASS, GPU, _node, dra_claim, dra_node, dra_slice


def dra_cluster(broken_class: bool = False) -> list[dict]:
    """16 nodes, 2 blocks x 2 racks x 4 nodes, each node's 8 GPUs one ResourceSlice, no nvidia.com/gpu in
    allocatable (as the issue's cluster), with the demo's KAI Topology."""
    from topology.demo import demo_objects
    nodes = [dra_node(_node(i, "zone-a", f"a-block-{(i - 1) // 8 + 1}", f"a-block-{(i - 1) // 8 + 1}-rack-{(i - 1) // 4 % 2 + 1}"))
             for i in range(1, 17)]
    objects = nodes + [dra_slice(n["metadata"]["name"]) for n in nodes] + [copy.deepcopy(DRA_GPU_CLASS)]
    objects += [o for o in demo_objects() if o["kind"] == "Topology"]
    if broken_class:
        objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "broken"},
                        "spec": {"selectors": [{"cel": {"expression": "device.driver =="}}]}})
    return objects


def test_a_rack_gang_asking_an_extended_resource_backed_by_dra_is_planned():
    job = indexed_job("llama", pods=8, gpus=4, required="rack", segment=None)
    client = make_client(job, objects=dra_cluster())
    answer = filter_(client, job_pods(job)[0])
    assert len(answer["NodeNames"]) == 1, answer
    plan = client.get("/debug/plans").json()
    assert plan["counts"]["planned"] == 1, plan


def test_an_allocated_claim_makes_its_devices_used_from_its_event_on():
    client = make_client(objects=dra_cluster())
    state = service(client)
    column = state.cluster.resources.column[GPU]
    node = state.cluster.node_index["node-03"]
    assert state.cluster.capacity.free[node, column] == 8
    claim = dra_claim("c", "team-a", "node-03", [f"gpu-{i}" for i in range(5)])
    response = client.post("/debug/objects", content=yaml.safe_dump(claim), headers={"content-type": "application/yaml"})
    assert response.status_code == 200, response.text
    assert state.cluster.capacity.free[node, column] == 3
    assert client.get("/debug/dra").json()["allocatedDevices"] == 5


def test_a_device_class_with_a_broken_expression_is_shown_and_counted_and_nothing_else_breaks():
    job = indexed_job("llama", pods=4, gpus=8, required="rack", segment=None)
    client = make_client(job, objects=dra_cluster(broken_class=True))
    dra = client.get("/debug/dra").json()
    assert "does not compile" in dra["classes"]["broken"]["error"]
    assert dra["classes"]["gpu.nvidia.com"]["devices"] == 128
    assert 'tas_extender_dra_class_errors{deviceclass="broken",failed="cel-compile"} 1.0' in client.get("/metrics").text
    assert len(filter_(client, job_pods(job)[0])["NodeNames"]) == 1


def claim_template(name: str, namespace: str = "team-a", **request) -> dict:
    """A ResourceClaimTemplate with one request `gpus` (`exactly` of gpu.nvidia.com by default)."""
    request = request or {"exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", **request}]}}}}


def job_with_claim(name: str, pods: int, template: str) -> dict:
    """An Indexed Job of `pods` x 1 cpu whose pods get their GPUs from the ResourceClaimTemplate `template`."""
    job = indexed_job(name, pods=pods, gpus=0, required="rack", segment=None)
    spec = job["spec"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    return job


def test_a_gang_whose_pods_get_gpus_from_a_claim_template_is_planned_one_pod_per_node():
    job = job_with_claim("llama", pods=4, template="gpu-8")
    client = make_client(job, objects=dra_cluster() + [claim_template("gpu-8")])
    answer = filter_(client, job_pods(job)[0])
    assert len(answer["NodeNames"]) == 1, answer
    gang = client.get("/debug/plans").json()["plans"][0]["gang"]
    detail = client.get(f"/debug/plans/{gang}").json()
    assert detail["summary"] == "4 pods x 8 gpu.nvidia.com"       # was "4 pods x 1 cpu", all on one node
    assert len({s["node"] for s in detail["slots"]}) == 4, detail["slots"]
    state = service(client)
    column = state.cluster.resources.column["gpu.nvidia.com"]
    assert state.cluster.capacity.reserved[:, column].sum() == 32


def refusal_of(client, pod) -> str:
    answer = filter_(client, pod)
    assert answer["NodeNames"] == [], answer
    return client.get("/debug/plans").json()["plans"][0]["reason"]


def test_a_claim_no_node_can_satisfy_is_refused_naming_the_claim_the_request_and_the_class():
    job = job_with_claim("llama", pods=4, template="gpu-16")
    template = claim_template("gpu-16", exactly={"deviceClassName": "gpu.nvidia.com", "count": 16})
    reason = refusal_of(make_client(job, objects=dra_cluster() + [template]), job_pods(job)[0])
    assert "claim gpus (ResourceClaimTemplate gpu-16) request gpus asks 16 of DeviceClass gpu.nvidia.com: " \
           "no node has 16 matching devices (at most 8)" in reason, reason
    assert "can never fit" in reason, reason


def test_a_missing_claim_template_is_refused_naming_the_template():
    job = job_with_claim("llama", pods=4, template="gpu-8")
    client = make_client(job, objects=dra_cluster())
    reason = refusal_of(client, job_pods(job)[0])
    assert "waits for ResourceClaimTemplate team-a/gpu-8 of claim gpus, which does not exist" in reason, reason
    assert "never fit" not in reason, reason
    response = client.post("/debug/objects", content=yaml.safe_dump(claim_template("gpu-8")),
                           headers={"content-type": "application/yaml"})
    assert response.status_code == 200, response.text
    assert len(filter_(client, job_pods(job)[0])["NodeNames"]) == 1        # the template lifts the refusal


def test_pods_naming_an_allocated_claim_are_planned_on_the_nodes_of_its_allocation_only():
    job = indexed_job("llama", pods=2, gpus=0, required="rack", segment=None)
    spec = job["spec"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "shared"}]
    claim = dra_claim("shared", "team-a", "node-07", ["gpu-0", "gpu-1"])
    client = make_client(job, objects=dra_cluster() + [claim])
    assert filter_(client, job_pods(job)[0])["NodeNames"] == ["node-07"]
    gang = client.get("/debug/plans").json()["plans"][0]["gang"]
    detail = client.get(f"/debug/plans/{gang}").json()
    assert {s["node"] for s in detail["slots"]} == {"node-07"}, detail["slots"]
    assert detail["summary"] == "2 pods x 1 cpu"              # no new devices: the claim's are counted


def test_a_claim_allocated_for_a_planned_pod_before_its_binding_is_not_counted_twice():
    """kube-scheduler allocates a pod's claim (here the claim it makes for nvidia.com/gpu: 8) in PreBind, before
    it binds the pod: from that claim event the devices are the claim's, and the pod's slot reservation no
    longer holds them too (the node would look overbooked and its held slots be re-planned)."""
    job = indexed_job("llama", pods=4, gpus=8, required="rack", segment=None)
    client = make_client(job, objects=dra_cluster())
    pod = job_pods(job)[0]
    (node,) = filter_(client, pod)["NodeNames"]
    state = service(client)
    index, column = state.cluster.node_index[node], state.cluster.resources.column[GPU]
    assert state.cluster.capacity.free[index, column] == 0                 # held for the planned pod
    claim = dra_claim(f"{pod['metadata']['name']}-gpu", pod["metadata"]["namespace"], node,
                      [f"gpu-{i}" for i in range(8)])
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": pod["metadata"]["name"],
                                       "uid": pod["metadata"].get("uid", "")}]
    response = client.post("/debug/objects", content=yaml.safe_dump(claim), headers={"content-type": "application/yaml"})
    assert response.status_code == 200, response.text
    assert state.cluster.capacity.free[index, column] == 0                 # not -8
    assert state.cluster.capacity.free[index, state.cluster.resources.column["gpu.nvidia.com"]] == 0
