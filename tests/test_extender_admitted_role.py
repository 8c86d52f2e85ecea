"""Issue 13 item 1 (remainder): a later pod of a role that differs from the shape the role was planned
with re-plans that role inside the gang's domains; the other roles' slots and the bound pods stay."""
from __future__ import annotations

from grouper import expand_pods

from service_helpers import GPU, failures, filter_, make_client, schedule, service

GANG = "team-a/pg-trainer-uid-trainer"


def pytorch_job(workers: int = 4) -> dict:
    def template(gpus: int) -> dict:
        return {"spec": {"containers": [{"name": "main", "image": "trainer",
                                         "resources": {"limits": {GPU: str(gpus)}}}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "trainer", "namespace": "team-a", "uid": "uid-trainer", "resourceVersion": "1",
                         "annotations": {"kai.scheduler/topology": "default",
                                         "kai.scheduler/topology-required-placement": "block"}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template(1)},
                                             "Worker": {"replicas": workers, "template": template(4)}}}}


def pods_of(job: dict, worker_cpu: str) -> dict[str, dict]:
    pods = {}
    for pod in expand_pods(job):
        pod["metadata"]["uid"] = f"uid-{pod['metadata']['name']}"
        pod["status"] = {"phase": "Pending"}
        if "worker" in pod["metadata"]["name"]:           # LimitRanger's default request for the workers
            pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": worker_cpu, GPU: "4"}
        pods[pod["metadata"]["name"]] = pod
    return pods


def test_a_differing_role_is_re_planned_alone_and_the_plan_is_kept():
    job = pytorch_job()
    client = make_client(job)
    state = service(client)
    pods = pods_of(job, worker_cpu="40")                      # at most two workers per 96-CPU node
    master_node = schedule(client, pods["trainer-master-0"])
    plan = state.plans.get(GANG)
    before = {s.slot: s.node for s in plan.slots.values()}
    answer = filter_(client, pods["trainer-worker-0"])        # the first worker shows the admitted shape
    assert len(answer["NodeNames"]) == 1, set(failures(answer).values())
    assert state.plans.get(GANG) is plan                      # the same plan, re-planned in place
    assert plan.slots[next(s for s in before if s.role == "master")].node == master_node
    assert "re-planned" in " ".join(plan.notes)
    assert (state.cluster.free >= 0).all()
    placed = [schedule(client, pods[f"trainer-worker-{i}"]) for i in range(4)]
    assert max(placed.count(node) for node in placed) <= 2
    assert plan.status == "bound"
