"""Claims of DRA devices through the extender's verbs (standalone, the demo cluster plus DRA objects): a native
PodGroup's resourceClaims (DRAWorkloadResourceClaims) are the gang's one claim, as the admitted pods name it."""
from __future__ import annotations

from service_helpers import filter_, make_client

from topology.demo import DRA_GPU_CLASS, dra_claim, dra_slice

ENTRY = {"name": "gpus", "resourceClaimTemplateName": "eight"}
TEMPLATE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "eight", "namespace": "team"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": 8}}]}}}}


def podgroup(made: str | None):
    group = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
             "metadata": {"name": "pg", "namespace": "team", "uid": "uid-pg", "resourceVersion": "1"},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": [ENTRY]}}
    if made:
        group["status"] = {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": made}]}
    return group


def member(name):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"schedulingGroup": {"podGroupName": "pg"}, "resourceClaims": [dict(ENTRY)],
                     "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}]},
            "status": {"phase": "Pending"}}


def test_a_native_podgroups_claim_is_planned_once_on_a_node_that_serves_it():
    made = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "pg-gpus-x", "namespace": "team", "uid": "uid-claim", "resourceVersion": "1"},
            "spec": TEMPLATE["spec"]["spec"]}
    pods = [member("m0"), member("m1")]
    client = make_client(podgroup("pg-gpus-x"), TEMPLATE, made, DRA_GPU_CLASS, dra_slice("node-01"),
                         dra_slice("node-02"), dra_claim("held", "team", "node-01", ["gpu-0"]), *pods)
    for pod in pods:
        assert filter_(client, pod)["NodeNames"] == ["node-02"]        # 7 free on node-01: the claim goes to node-02
    (plan,) = client.get("/debug/plans").json()["plans"]
    assert "gpu.nvidia.com" not in plan["summary"]                   # not 8 GPUs per pod from the template


def test_a_native_podgroups_claim_not_made_yet_waits():
    client = make_client(podgroup(None), TEMPLATE, DRA_GPU_CLASS, dra_slice("node-01"), member("m0"), member("m1"))
    answer = filter_(client, member("m0"))
    assert not answer["NodeNames"]
    failed = {**answer["FailedNodes"], **answer.get("FailedAndUnresolvableNodes", {})}
    assert "waits for the ResourceClaim PodGroup team/pg makes from ResourceClaimTemplate eight" in next(iter(failed.values()))
