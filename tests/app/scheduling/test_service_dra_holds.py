"""The claims kube-scheduler allocates for a gang's pod before it binds the pod (issue 38): the slot's
reservation and the claim hold the same devices only once, so the gang is bound as first planned."""
import pytest
import yaml

from service_helpers import bind, filter_, indexed_job, job_pods, make_client, service
from test_service_dra import claim_template, dra_cluster, job_with_claim
from topology.demo import GPU, dra_claim


def allocated_for(pod: dict, node: str, devices: list[str]) -> dict:
    """The claim of a pod as kube-scheduler allocates it in PreBind, before the bind (the one it makes for
    nvidia.com/gpu through extendedResourceName, or kube-controller-manager's from the pod's template):
    owned by the pod and reserved for it."""
    metadata = pod["metadata"]
    claim = dra_claim(f"{metadata['name']}-gpus", metadata["namespace"], node, devices)
    claim["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": metadata["name"],
                                             "uid": metadata["uid"], "controller": True}]
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": metadata["name"], "uid": metadata["uid"]}]
    return claim


def post(client, obj: dict) -> None:
    response = client.post("/debug/objects", content=yaml.safe_dump(obj), headers={"content-type": "application/yaml"})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("ask", ["extended-resource", "claim-template"])
def test_claims_allocated_before_the_bind_do_not_make_the_gang_re_plan(ask):
    """8 pods x 4 GPUs in one rack, two pods a node. kube-scheduler allocates the claims of both pods of a
    node, then binds the first: the second's slot keeps its node (before: its hold and the two claims took
    16 of 8 GPUs, the bind's overbooking check dropped it, 're-plan of job-1 failed (node without room)'); a
    new model built meanwhile holds every slot again where it was (before: the fit check of a slot held again
    asked its devices free beside the claim's, and both slots of the node were re-planned)."""
    if ask == "claim-template":
        job = job_with_claim("llama", pods=8, template="gpu-4")
        template = claim_template("gpu-4", exactly={"deviceClassName": "gpu.nvidia.com", "count": 4})
        client, resource = make_client(job, objects=dra_cluster() + [template]), "gpu.nvidia.com"
    else:
        job = indexed_job("llama", pods=8, gpus=4, required="rack", segment=None)
        client, resource = make_client(job, objects=dra_cluster()), GPU
    state = service(client)
    pods = job_pods(job)
    placed = {}
    for pod in pods:
        (placed[pod["metadata"]["name"]],) = filter_(client, pod)["NodeNames"]
    first, second = pods[0], next(p for p in pods[1:] if placed[p["metadata"]["name"]] == placed["llama-0"])
    node = placed["llama-0"]
    index, column = state.cluster.node_index[node], state.cluster.resources.column[resource]
    post(client, allocated_for(first, node, ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]))
    post(client, allocated_for(second, node, ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]))
    assert state.cluster.capacity.free[index, column] == 0          # was -8
    post(client, {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "other"},
                  "spec": {}})
    state.refresh()              # a new model (as after any DeviceClass or ResourceSlice event): every slot held again
    (plan,) = state.plans
    assert {str(s.slot): (s.node, s.reserved) for s in plan.slots.values()} == \
        {f"job-{i}": (placed[f"llama-{i}"], True) for i in range(8)}
    assert not plan.notes, plan.notes
    assert state.cluster.capacity.free[index, column] == 0
    assert bind(client, first, node) == ""
    slot = plan.slot_of_pod(f"team-a/{second['metadata']['name']}")
    assert (slot.node, slot.status, slot.reserved) == (node, "planned", True)
    assert not plan.notes, plan.notes
    assert state.cluster.capacity.free[index, column] == 0
    assert filter_(client, second)["NodeNames"] == [node]
    assert bind(client, second, node) == ""
    assert not plan.notes, plan.notes
    assert state.cluster.capacity.free[index, column] == 0
