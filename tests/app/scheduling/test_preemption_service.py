"""Gang preemption through the standalone service: the seed story of issue 9 end to end (filter ->
evictions -> waiting -> victims gone -> the plan binds), dry-run and off, refused evictions, and the
preempt verb keeping only our victims."""
from __future__ import annotations

import copy

import pytest
from fastapi.testclient import TestClient

from app.memory import MemoryWriter
from app.ports import EvictionRefused
from app.server import create_app
from app.settings import Settings
from app.state import NODE_KIND, POD_KIND
from topology.groups import Slot

from service_helpers import (GPU, Clock, bind, failures, filter_, job_pods, plain_pod, preempt, prioritize, refusal,
                             watch)

SPINE, LEAF, UNIT, HOST = "example.com/spine", "example.com/leaf", "example.com/unit", "kubernetes.io/hostname"


def fabric_nodes() -> list[dict]:
    """Twelve 8-GPU nodes: unit 0 (nodes 0-3) under leaf A, units 1 and 2 (nodes 4-11) under leaf B."""
    nodes = []
    for i in range(12):
        unit = i // 4
        name = f"node-{i:02d}"
        nodes.append({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": name, "labels": {SPINE: "spine-0", LEAF: "leaf-a" if unit == 0 else "leaf-b",
                                                            UNIT: f"unit-{unit}", HOST: name}},
                      "spec": {},
                      "status": {"allocatable": {"cpu": "96", "memory": "1024Gi", GPU: "8", "pods": "110"},
                                 "conditions": [{"type": "Ready", "status": "True"}]}})
    topology = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "fabric"},
                "spec": {"levels": [{"nodeLabel": SPINE, "alias": "spine"}, {"nodeLabel": LEAF, "alias": "leaf"},
                                    {"nodeLabel": UNIT, "alias": "unit"}, {"nodeLabel": HOST, "alias": "host"}]}}
    return nodes + [topology]


def job(name: str, namespace: str, pods: int, *, priority: int, annotations: dict | None = None,
        template_annotations: dict | None = None) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "1",
                         "annotations": annotations or {}},
            "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                     "template": {"metadata": {"annotations": template_annotations or {}},
                                  "spec": {"priority": priority, "containers": [{
                                      "name": "main", "image": "trainer",
                                      "resources": {"limits": {GPU: "8"}}}]}}}}


def running(job_object: dict, first_node: int) -> list[dict]:
    """The job's pods, bound one per node from `first_node` on and running."""
    pods = job_pods(job_object)
    for i, pod in enumerate(pods):
        pod["spec"]["nodeName"] = f"node-{first_node + i:02d}"
        pod["spec"]["priority"] = job_object["spec"]["template"]["spec"]["priority"]
        pod["status"] = {"phase": "Running"}
    return pods


def llm_job(priority: int = 1000) -> dict:
    return job("llm", "prod", 8, priority=priority,
               annotations={"kai.scheduler/topology": "fabric",
                            "kai.scheduler/topology-preferred-placement": "leaf"},
               template_annotations={"kai.scheduler/segment-size": "4",
                                     "kai.scheduler/segment-topology-required-placement": "unit"})


class RecordingWriter(MemoryWriter):
    """The standalone writer, except that evictions are only recorded (victims terminate when the test
    deletes them), and chosen pods refuse eviction as a PodDisruptionBudget would."""

    def __init__(self, state, refuse: set[str] = frozenset()):
        super().__init__(state)
        self.evictions: list[tuple[str, str, str | None]] = []
        self.refuse = set(refuse)

    def evict(self, namespace: str, name: str, uid: str | None = None) -> None:
        if f"{namespace}/{name}" in self.refuse:
            raise EvictionRefused(f"{namespace}/{name}: Cannot evict pod as it would violate the pod's disruption budget.")
        self.evictions.append((namespace, name, uid))


def seed_client(preemption: str = "on", refuse: set[str] = frozenset(),
                llm: dict | None = None) -> tuple[TestClient, RecordingWriter]:
    job_a = job("job-a", "research", 4, priority=0)
    job_b = job("job-b", "research", 4, priority=0)
    objects = fabric_nodes() + [job_a, job_b, llm or llm_job()] + running(job_a, 0) + running(job_b, 4)
    app = create_app(Settings(preemption=preemption), objects=copy.deepcopy(objects), clock=Clock(),
                     writer=lambda state: RecordingWriter(state, refuse))
    return TestClient(app), app.state.engine.writer


def terminate(client: TestClient, keys: list[str]) -> None:
    state = client.app.state.service
    for key in keys:
        namespace, name = key.split("/", 1)
        state.apply(POD_KIND, "DELETED", state.find_pod(namespace, name))


def gang_key(client: TestClient) -> str:
    return next(p["gang"] for p in client.get("/debug/plans").json()["plans"] if p["namespace"] == "prod")


JOB_B = [f"research/job-b-{i}" for i in range(4)]


def test_seed_story_end_to_end():
    client, writer = seed_client()
    pods = job_pods(llm_job())
    answer = filter_(client, pods[0])
    assert answer["NodeNames"] == [] and answer["Error"] == ""
    reasons = set(failures(answer).values())
    assert len(failures(answer)) == 12 and len(reasons) == 1
    reason = reasons.pop()
    assert "waiting for 4 victims to terminate in leaf-b (preempted gang research/job-b)" in reason
    assert sorted(f"{ns}/{name}" for ns, name, _ in writer.evictions) == JOB_B          # never job-a
    assert all(uid == f"uid-{name}" for _, name, uid in writer.evictions)
    events = {(e["object"], e["reason"]) for e in writer.events}
    assert ("prod/llm-0", "Preempting") in events
    assert {(key, "Preempted") for key in JOB_B} <= events
    preempted = next(e for e in writer.events if e["reason"] == "Preempted")
    assert "Preempted by gang prod/" in preempted["message"] and "leaf-b" in preempted["message"]

    detail = client.get(f"/debug/plans/{gang_key(client)}").json()
    assert detail["preemption"]["domain"] == "spine-0/leaf-b"
    assert sorted(v["pod"] for v in detail["preemption"]["victims"]) == JOB_B
    assert detail["preemption"]["explanation"].startswith("leaf leaf-b: evicting gang research/job-b")
    assert detail["preemption"]["remaining"] == 4

    # while the victims terminate: the gang's other pods wait too, nobody else takes the freed room
    assert filter_(client, pods[5])["NodeNames"] == []
    other = plain_pod("squatter", gpus=8)
    passing = set(filter_(client, other)["NodeNames"])              # kube-scheduler itself rules out 0-3
    assert not passing & {f"node-{i:02d}" for i in range(4, 12)}     # 4-7 freed and 8-11: reserved for llm
    assert len(writer.evictions) == 4                                # no second round of evictions

    terminate(client, JOB_B)
    placed = {}
    for pod in pods:
        answer = filter_(client, pod)
        assert len(answer["NodeNames"]) == 1, answer["FailedNodes"]
        node = answer["NodeNames"][0]
        assert prioritize(client, pod, [node])[node] == 10
        assert bind(client, pod, node) == ""
        placed[pod["metadata"]["name"]] = int(node.split("-")[1])
    assert sorted(placed.values()) == list(range(4, 12))
    units = [{placed[f"llm-{i}"] // 4 for i in segment} for segment in (range(0, 4), range(4, 8))]
    assert sorted(map(sorted, units)) == [[1], [2]]
    detail = client.get(f"/debug/plans/{gang_key(client)}").json()
    assert detail["status"] == "bound" and detail["preemption"]["status"] == "done"
    assert len(writer.evictions) == 4


def test_dry_run_only_reports():
    client, writer = seed_client("dry-run")
    answer = filter_(client, job_pods(llm_job())[0])
    assert answer["NodeNames"] == [] and writer.evictions == []
    reason = refusal(answer)
    assert "dry-run preemption: would evict 4 pods in leaf-b (preempted gang research/job-b)" in reason
    detail = client.get(f"/debug/plans/{gang_key(client)}").json()
    assert detail["status"] == "refused" and detail["preemption"]["status"] == "dry-run"
    assert sorted(v["pod"] for v in detail["preemption"]["victims"]) == JOB_B
    assert client.app.state.service.plans.reservation_count() == 0
    assert not [e for e in writer.events if e["reason"] in ("Preempting", "Preempted")]


def test_off_never_evicts():
    client, writer = seed_client("off")
    answer = filter_(client, job_pods(llm_job())[0])
    assert answer["NodeNames"] == [] and writer.evictions == []
    reason = refusal(answer)
    assert "waiting" not in reason and "preemption" not in reason
    assert client.get(f"/debug/plans/{gang_key(client)}").json().get("preemption") is None


def test_refused_eviction_picks_again_without_that_gang():
    client, writer = seed_client(refuse={"research/job-b-2"})
    answer = filter_(client, job_pods(llm_job())[0])
    reason = refusal(answer)
    assert "preempted gang research/job-a" in reason
    evicted = sorted(f"{ns}/{name}" for ns, name, _ in writer.evictions)
    assert evicted == sorted(JOB_B[:2] + JOB_B[3:] + [f"research/job-a-{i}" for i in range(4)])
    refused = [e for e in writer.events if e["reason"] == "PreemptionRefused"]
    assert refused and "research/job-b-2" in refused[0]["message"]


def test_preemption_policy_never_does_not_preempt():
    never = llm_job()
    never["spec"]["template"]["spec"]["preemptionPolicy"] = "Never"
    client, writer = seed_client(llm=never)
    answer = filter_(client, job_pods(never)[0])
    assert answer["NodeNames"] == [] and writer.evictions == []
    assert "waiting" not in refusal(answer)


def test_equal_priority_is_never_preempted():
    client, writer = seed_client(llm=llm_job(priority=0))
    answer = filter_(client, job_pods(llm_job(priority=0))[0])
    assert answer["NodeNames"] == [] and writer.evictions == []
    assert "waiting" not in refusal(answer)


def test_preempt_verb_keeps_only_our_victims_on_the_pods_own_planned_node():
    """kube-scheduler nominates the pod to a node among those offered, and a nominated pod holds its node
    against pods of equal priority: each pod of the gang is offered only its own planned node's victims."""
    client, _ = seed_client()
    pods = job_pods(llm_job())
    filter_(client, pods[0])                               # chooses job-b and starts evicting it
    proposed = {"node-00": ["uid-job-a-0"], "node-04": ["uid-job-b-0"],
                "node-05": ["uid-job-b-1", "uid-unrelated"], "node-09": ["uid-unrelated"]}
    plan = client.app.state.service.plans.get(gang_key(client))
    planned = {i: plan.slots[Slot("job", i)].node for i in range(len(pods))}
    assert {"node-04", "node-05"} <= set(planned.values())
    wanted = {"node-04": ["uid-job-b-0"], "node-05": ["uid-job-b-1"]}
    for i, pod in enumerate(pods):
        node = planned[i]
        assert preempt(client, pod, proposed) == ({node: wanted[node]} if node in wanted else {})


def test_preempt_verb_starts_the_preemption_of_a_gang_whose_filter_never_ran():
    """On a full cluster kube-scheduler's own filters leave no node, so it skips the extender's filter and
    calls preempt first: the gang is planned there and its victims chosen, not an empty answer forever."""
    client, writer = seed_client()
    pod = job_pods(llm_job())[0]
    kept = preempt(client, pod, {"node-04": ["uid-job-b-0"], "node-09": ["uid-unrelated"]})
    assert kept == {"node-04": ["uid-job-b-0"]}
    assert writer.evictions


@pytest.mark.parametrize("mode", ["off", "dry-run"])
def test_preempt_verb_offers_nothing_when_not_preempting(mode):
    client, _ = seed_client(mode)
    pod = job_pods(llm_job())[0]
    filter_(client, pod)
    assert preempt(client, pod, {"node-04": ["uid-job-b-0"]}) == {}


def test_preempt_verb_passes_plain_pods_through():
    client, _ = seed_client()
    assert preempt(client, plain_pod("web", gpus=8), {"node-04": ["uid-job-b-0"]}) == {"node-04": ["uid-job-b-0"]}


def test_the_hold_survives_a_cluster_rebuild_while_victims_terminate():
    client, writer = seed_client()
    pods = job_pods(llm_job())
    filter_(client, pods[0])
    state = client.app.state.service
    gang = gang_key(client)
    before = {str(s.slot): s.node for s in state.plans.get(gang).slots.values()}
    state.replace(NODE_KIND, state.objects.list("Node"))          # a relist: the cluster model is rebuilt
    plan = state.plans.get(gang)
    assert {str(s.slot): s.node for s in plan.slots.values()} == before
    assert all(s.reserved for s in plan.slots.values())
    assert "waiting for 4 victims" in refusal(filter_(client, pods[1]))
    terminate(client, JOB_B)
    assert filter_(client, pods[1])["NodeNames"] == [before["job-1"]]


def test_against_a_blocking_writer_the_search_and_evictions_run_in_threads():
    client, writer = seed_client(refuse={"research/job-b-0"})
    writer.blocking = True                                       # as the API writer: off the event loop
    pods = job_pods(llm_job())
    preemptor = client.app.state.engine.preemptor

    def settle():
        preemptor.searcher.join(timeout=60)
        if preemptor.sender is not None:
            preemptor.sender.join(timeout=60)

    answer = filter_(client, pods[0])                            # answered at once; the search runs off the lock
    assert "looking for lower-priority pods to preempt" in refusal(answer)
    settle()
    assert sorted(name for _, name, _ in writer.evictions) == ["job-b-1", "job-b-2", "job-b-3"]
    # the refusal dropped the hold: the next call chooses again, without job-b
    filter_(client, pods[0])
    settle()
    assert sorted(name for _, name, _ in writer.evictions)[:4] == [f"job-a-{i}" for i in range(4)]
    answer = filter_(client, pods[0])
    assert "preempted gang research/job-a" in refusal(answer)


# --- exclusive gangs (LeaderWorkerSet exclusive-topology) -----------------------------------------------

def serving_lws(*, exclusive: bool) -> dict:
    """One group of 4 pods (leader + 3 workers) of 8 GPUs at priority 1000, in one unit."""
    annotations = {"kai.scheduler/topology": "fabric"}
    if exclusive:
        annotations["leaderworkerset.sigs.k8s.io/exclusive-topology"] = UNIT
    else:
        annotations["kai.scheduler/topology-required-placement"] = "unit"
    template = {"spec": {"priority": 1000, "containers": [{"name": "main", "image": "vllm",
                                                           "resources": {"limits": {GPU: "8"}}}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "serve", "namespace": "prod", "uid": "uid-serve", "resourceVersion": "1",
                         "annotations": annotations},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 4, "leaderTemplate": copy.deepcopy(template),
                                                             "workerTemplate": copy.deepcopy(template)}}}


def shared_unit_client(lws: dict) -> tuple[TestClient, RecordingWriter]:
    """Unit 0: a priority-0 job and a priority-2000 cpu-only pod that may not be evicted; unit 1: a
    priority-10 job; unit 2: a priority-5000 job."""
    cheap, dearer, serving = (job("job-a", "research", 4, priority=0), job("job-b", "research", 4, priority=10),
                              job("job-c", "ops", 4, priority=5000))
    guard = plain_pod("guard", cpu="1", namespace="ops")
    guard["spec"].update({"nodeName": "node-01", "priority": 2000})
    guard["status"] = {"phase": "Running"}
    objects = (fabric_nodes() + [cheap, dearer, serving, lws, guard] + running(cheap, 0) + running(dearer, 4)
               + running(serving, 8))
    app = create_app(Settings(preemption="on"), objects=copy.deepcopy(objects), clock=Clock(), writer=RecordingWriter)
    return TestClient(app), app.state.engine.writer


def test_exclusive_lws_does_not_preempt_into_a_unit_a_higher_priority_pod_keeps():
    lws = serving_lws(exclusive=True)
    client, writer = shared_unit_client(lws)
    answer = filter_(client, job_pods(lws)[0])
    assert answer["NodeNames"] == []
    assert "waiting for 4 victims to terminate in unit-1 (preempted gang research/job-b)" in \
        refusal(answer)
    assert sorted(f"{ns}/{name}" for ns, name, _ in writer.evictions) == JOB_B        # never job-a's unit
    detail = client.get(f"/debug/plans/{gang_key(client)}").json()
    assert detail["preemption"]["domain"] == "spine-0/leaf-b/unit-1"
    assert {s["node"] for s in detail["slots"]} == {f"node-{i:02d}" for i in range(4, 8)}
    terminate(client, JOB_B)
    for pod in job_pods(lws):
        answer = filter_(client, pod)
        assert len(answer["NodeNames"]) == 1 and answer["NodeNames"][0] in {f"node-{i:02d}" for i in range(4, 8)}
        assert bind(client, pod, answer["NodeNames"][0]) == ""
    assert client.get(f"/debug/plans/{gang_key(client)}").json()["status"] == "bound"


def test_non_exclusive_lws_preempts_the_cheapest_unit_beside_the_higher_priority_pod():
    lws = serving_lws(exclusive=False)
    client, writer = shared_unit_client(lws)
    answer = filter_(client, job_pods(lws)[0])
    assert "preempted gang research/job-a" in refusal(answer)
    assert sorted(f"{ns}/{name}" for ns, name, _ in writer.evictions) == [f"research/job-a-{i}" for i in range(4)]


def test_a_wake_up_plans_and_preempts_for_a_gang_first_heard_of_through_preempt_while_incomplete():
    """On a full cluster kube-scheduler's own filters reject every node (NodeResourcesFit), so each member
    reaches us only through the preempt verb, and while the gang is incomplete there is nothing to preempt
    for. Parked as rejected by NodeResourcesFit, the pods come back only when a pod is deleted or a node is
    added: an annotation (the usual wake-up) does not move them. So when the wake-up of such a gang is due
    and the gang is whole, the service plans it and starts its preemption itself; the victims' deletion then
    moves the pods (an e2e preemption test stalled with all four pods parked and nothing evicted)."""
    clock = Clock()
    jobs = [job(f"job-{x}", "research", 4, priority=0) for x in "abc"]
    urgent = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
              "metadata": {"name": "pg-urgent", "namespace": "prod", "uid": "uid-pg-urgent", "resourceVersion": "1"},
              "spec": {"minMember": 4, "queue": "prod",
                       "topologyConstraint": {"topology": "fabric", "requiredTopologyLevel": UNIT}}}
    objects = fabric_nodes() + jobs + [urgent] + [p for i, j in enumerate(jobs) for p in running(j, 4 * i)]
    app = create_app(Settings(), objects=copy.deepcopy(objects), clock=clock,
                     writer=lambda state: RecordingWriter(state))
    client, writer = TestClient(app), app.state.engine.writer
    pods = [member("pg-urgent", i) for i in range(4)]
    for pod in pods[:-1]:                           # each member's preempt call while the gang is short
        assert preempt(client, pod, {"node-04": ["uid-job-b-0"]}) == {}
    watch(client, pods[-1])                         # the last member: its preempt call came before the watch
    assert writer.evictions == []
    clock.now += 60
    app.state.engine.wake_refused()
    evicted = sorted(f"{ns}/{name}" for ns, name, _ in writer.evictions)
    assert len(evicted) == 4 and len({name.rsplit("-", 1)[0] for name in evicted}) == 1, evicted


def member(group: str, index: int) -> dict:
    """A high-priority 8-GPU pod of a KAI PodGroup, before kube-scheduler binds it."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{group}-{index}", "namespace": "prod", "uid": f"uid-{group}-{index}",
                         "annotations": {"pod-group-name": group}},
            "spec": {"schedulerName": "tas-scheduler", "priority": 1000,
                     "containers": [{"name": "main", "image": "trainer", "resources": {"limits": {GPU: "8"}}}]}}
