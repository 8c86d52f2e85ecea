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
    assert 'tas_extender_dra_class_errors{deviceclass="broken"} 1.0' in client.get("/metrics").text
    assert len(filter_(client, job_pods(job)[0])["NodeNames"]) == 1
