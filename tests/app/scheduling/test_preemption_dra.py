"""Gang preemption and the what-if advice on GPUs published through DRA (issue 38 items 3 and 4).

One rack of four nodes whose 8 GPUs each exist only as DRA devices (a ResourceSlice per node, the DeviceClass
gpu.nvidia.com serving nvidia.com/gpu). A pod holding GPUs there has them through an allocated claim
reserved for it; its own usage has no GPU (the claim's devices are counted once, from the claim), so the
victim search counts what evicting it frees from its claims (topology Cluster.eviction_usage)."""
from __future__ import annotations

import copy

from fastapi.testclient import TestClient
from test_preemption_service import RecordingWriter, job, running

from app.server import create_app
from app.settings import Settings
from app.state import POD_KIND
from service_helpers import Clock, filter_, job_pods, refusal, watch
from topology.demo import DRA_GPU_CLASS, _node, demo_objects, dra_claim, dra_node, dra_slice

RACK = "a-block-1-rack-1"
NODES = [f"node-{i:02d}" for i in range(1, 5)]
KUBE_SCHEDULER_REFUSAL = "0/4 nodes are available: 4 cannot allocate all claims. preemption: 0/4 nodes are available"


def rack(dra: bool = True) -> list[dict]:
    """The four nodes (DRA devices only, or with `dra=False` device-plugin GPUs beside the same DeviceClass),
    the class and the demo's Topology."""
    nodes = [_node(i, "zone-a", "a-block-1", RACK) for i in range(1, 5)]
    objects = [dra_node(n) for n in nodes] + [dra_slice(n) for n in NODES] if dra else nodes
    return objects + [copy.deepcopy(DRA_GPU_CLASS)] + [o for o in demo_objects() if o["kind"] == "Topology"]


def holding(pods: list[dict]) -> list[dict]:
    """Each running pod's claim of its node's 8 GPUs, reserved for it (as kube-scheduler leaves it)."""
    claims = []
    for pod in pods:
        metadata = pod["metadata"]
        claim = dra_claim(f"{metadata['name']}-gpu", metadata["namespace"], pod["spec"]["nodeName"],
                          [f"gpu-{i}" for i in range(8)])
        claim["status"]["reservedFor"] = [{"resource": "pods", "name": metadata["name"], "uid": metadata["uid"]}]
        claims.append(claim)
    return claims


def gang(name: str, priority: int) -> dict:
    return job(name, "prod", 4, priority=priority, annotations={
        "kai.scheduler/topology": "default", "kai.scheduler/topology-required-placement": "rack"})


def client_of(objects: list[dict], preemption: str = "on", clock: Clock | None = None):
    app = create_app(Settings(preemption=preemption), objects=copy.deepcopy(objects), clock=clock or Clock(),
                     writer=lambda state: RecordingWriter(state))
    return TestClient(app), app.state.engine.writer


def low_rack(high: dict) -> tuple[list[dict], list[dict]]:
    """The rack full of a priority-0 gang `research/low`, each pod on its DRA GPUs; and `high`'s pods."""
    low = job("low", "research", 4, priority=0)
    low_pods = running(low, 1)
    return rack() + [low, high] + low_pods + holding(low_pods), job_pods(high)


def gang_key(client) -> str:
    return next(p["gang"] for p in client.get("/debug/plans").json()["plans"] if p["namespace"] == "prod")


LOW = [f"research/low-{i}" for i in range(4)]


def test_preemption_evicts_the_gang_holding_the_dra_gpus():
    """Before eviction_usage the search saw no GPU freed by evicting `low` (its pods' GPU columns are zero in
    their usage) and found nothing to preempt."""
    objects, pods = low_rack(gang("high", 1000))
    client, writer = client_of(objects)
    answer = filter_(client, pods[0])
    assert "waiting for 4 victims" in refusal(answer), refusal(answer)
    assert sorted(f"{ns}/{name}" for ns, name, _ in writer.evictions) == LOW


def test_the_advice_names_the_holders_of_the_dra_gpus_a_lower_priority_gang_cannot_preempt():
    holders = []
    for i, node in enumerate(NODES):
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"holder-{i}", "namespace": "research", "uid": f"uid-holder-{i}"},
               "spec": {"nodeName": node, "priority": 1000, "containers": [{
                   "name": "main", "image": "app", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
               "status": {"phase": "Running"}}
        holders.append(pod)
    later = gang("later", 0)
    client, writer = client_of(rack() + [later] + holders + holding(holders))
    filter_(client, job_pods(later)[0])
    advice = client.get(f"/debug/whatif/{gang_key(client)}").json()
    assert advice["verdict"] == "needs-priority", advice
    assert sorted(v["pod"] for v in advice["victims"]) == [f"research/holder-{i}" for i in range(4)]
    assert sorted(advice["placement"].values()) == NODES
    assert advice["evicted"]["nvidia.com/gpu"] == 32
    assert writer.evictions == []


def test_claims_the_pods_of_a_gang_share_free_their_devices_when_the_whole_gang_goes():
    """`low` runs 2 pods per node, each with its own claim of 2 GPUs, and both share a claim of their node's
    last 4 GPUs: evicting the whole gang frees 8 GPUs per node (a shared claim once its holders are all
    gone), so the 4 x 8-GPU gang preempts it."""
    low = job("low", "research", 8, priority=0)
    low_pods = job_pods(low)
    claims = []
    for i, pod in enumerate(low_pods):
        node = NODES[i // 2]
        pod["spec"].update(nodeName=node, priority=0)
        pod["status"] = {"phase": "Running"}
        own = dra_claim(f"own-{i}", "research", node, [f"gpu-{2 * (i % 2)}", f"gpu-{2 * (i % 2) + 1}"])
        own["status"]["reservedFor"] = [{"resource": "pods", "name": pod["metadata"]["name"]}]
        claims.append(own)
    for k, node in enumerate(NODES):
        shared = dra_claim(f"shared-{k}", "research", node, [f"gpu-{i}" for i in range(4, 8)])
        shared["status"]["reservedFor"] = [{"resource": "pods", "name": f"low-{j}"} for j in (2 * k, 2 * k + 1)]
        claims.append(shared)
    high = gang("high", 1000)
    client, writer = client_of(rack() + [low, high] + low_pods + claims)
    state = client.app.state.service
    column = state.cluster.resources.column["nvidia.com/gpu"]
    assert state.cluster.free[:, column].tolist() == [0, 0, 0, 0]
    filter_(client, job_pods(high)[0])
    assert sorted(f"{ns}/{name}" for ns, name, _ in writer.evictions) == [f"research/low-{i}" for i in range(8)]


def test_the_re_check_after_a_threaded_search_counts_the_freed_dra_gpus():
    """Against the API the search runs in a thread on a snapshot and its choice is committed only if the
    cluster still allows it (Preemptor._still_holds); that check too must count the victims' claims, or it
    rejects every choice and the search starts again forever."""
    objects, pods = low_rack(gang("high", 1000))
    client, _ = client_of(objects, preemption="dry-run")
    filter_(client, pods[0])
    preemptor = client.app.state.engine.preemptor
    plan = client.app.state.service.plans.get(gang_key(client))
    snapshot = preemptor._snapshot(plan.tree)
    result = preemptor._search(snapshot, set(), set())
    assert result.found and sorted(v.pod for v in result.victims) == LOW
    assert preemptor._still_holds(snapshot[0], result)


def unschedulable(pod: dict, message: str = KUBE_SCHEDULER_REFUSAL) -> dict:
    """The pod as kube-scheduler leaves it after its own filters passed no node."""
    pod = copy.deepcopy(pod)
    pod["status"] = {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
        "lastTransitionTime": "2026-12-02T00:00:00Z"}]}
    return pod


def park(client, pods: list[dict]) -> None:
    """Every pod of the gang watched, the first one then marked unschedulable by kube-scheduler."""
    for pod in pods:
        watch(client, pod)
    client.app.state.service.apply(POD_KIND, "MODIFIED", unschedulable(pods[0]))


def test_a_gang_kube_scheduler_refuses_for_dra_devices_gets_its_preemption_from_the_service_at_once():
    """kube-scheduler's DynamicResources refuses every node ('cannot allocate all claims') and its own
    preemption finds no candidate, so it never calls the preempt verb: the service plans the gang and starts
    its preemption on the next wake-up round, without waiting for a refusal's back-off."""
    clock = Clock()
    objects, pods = low_rack(gang("high", 1000))
    client, writer = client_of(objects, clock=clock)
    park(client, pods)
    client.app.state.engine.wake_refused()           # the loop's next round; the clock has not moved
    assert sorted(f"{ns}/{name}" for ns, name, _ in writer.evictions) == LOW
    client.app.state.engine.wake_refused()
    assert len(writer.evictions) == 4                # once


def test_no_immediate_preemption_where_kube_scheduler_preempts_itself():
    """On device-plugin nodes (the DeviceClass serving nvidia.com/gpu exists, but every node has
    nvidia.com/gpu in its allocatable) NodeResourcesFit refuses and kube-scheduler's preemption calls the
    preempt verb: the service waits for it, and the gang stays unplanned (as the what-if advice asked by the
    workload's name expects: e2e test_a_gang_kube_scheduler_refuses_itself_is_advised_by_its_workload_name)."""
    high = gang("high", 1000)
    low = job("low", "research", 4, priority=0)
    client, writer = client_of(rack(dra=False) + [low, high] + running(low, 1))
    park(client, job_pods(high))
    client.app.state.engine.wake_refused()
    assert writer.evictions == []
    assert not [p for p in client.get("/debug/plans").json()["plans"] if p["namespace"] == "prod"]
