"""Issue 13 item 1: the gang is planned from the pods as admitted (tolerations added by
ExtendedResourceToleration, default requests filled by LimitRanger), not only from the template."""
from __future__ import annotations

from topology.demo import demo_objects

from service_helpers import GPU, indexed_job, job_pods, make_client, schedule, service

TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}


def gpu_tainted_nodes() -> list[dict]:
    objects = demo_objects()
    for obj in objects:
        if obj.get("kind") == "Node":
            taints = obj["spec"].setdefault("taints", [])
            taints.append({"key": GPU, "value": "present", "effect": "NoSchedule"})
    return objects


def admitted(pods: list[dict], *, cpu: str | None = None) -> list[dict]:
    """What the API server stores: ExtendedResourceToleration adds the GPU toleration, LimitRanger a CPU request."""
    for pod in pods:
        spec = pod["spec"]
        spec.setdefault("schedulerName", "tas-scheduler")
        spec.setdefault("tolerations", []).append(dict(TOLERATION))
        if cpu:
            for container in spec["containers"]:
                container.setdefault("resources", {}).setdefault("requests", {})["cpu"] = cpu
    return pods


def test_gang_lands_on_gpu_tainted_nodes_with_the_toleration_admission_added():
    job = indexed_job("tainted", pods=4, gpus=4, segment=None)
    client = make_client(job, objects=gpu_tainted_nodes())
    placed = [schedule(client, pod) for pod in admitted(job_pods(job))]
    assert all(placed), placed
    assert service(client).plans.get("team-a/pg-tainted-uid-tainted").status == "bound"


def test_default_cpu_request_from_a_limit_range_is_planned_no_node_over_allocatable():
    job = indexed_job("limited", pods=8, gpus=1, segment=None, required=None)
    client = make_client(job)
    state = service(client)
    cpu = state.cluster.resources.column["cpu"]
    allocatable = int(state.cluster.capacity.allocatable[:, cpu].max())   # millicores
    share = f"{allocatable // 4000}"            # four pods fill a node's CPU: the template says none
    placed = [schedule(client, pod) for pod in admitted(job_pods(job), cpu=share)]
    assert all(placed), placed
    assert (state.cluster.free >= 0).all()
    assert max(placed.count(node) for node in placed) <= 4


def test_gang_priority_comes_from_the_pods_the_priority_plugin_admitted():
    job = indexed_job("urgent", pods=4, gpus=4, segment=None)
    job["spec"]["template"]["spec"]["priorityClassName"] = "high"      # the template has no spec.priority
    client = make_client(job)
    pods = job_pods(job)
    for pod in pods:
        pod["spec"]["priority"] = 100000                              # set by the Priority admission plugin
        pod["spec"]["preemptionPolicy"] = "Never"
    schedule(client, pods[0])
    tree = service(client).plans.get("team-a/pg-urgent-uid-urgent").tree
    assert (tree.priority, tree.preemption_policy) == (100000, "Never")
