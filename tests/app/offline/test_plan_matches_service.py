"""`tas-extender plan` and the running service build the planner's input in one place
(app/scheduling/plan_input.py), so on the same cluster they place a gang on the same nodes.

Before, `plan` left out pod (anti-)affinity against running pods: a 4-pod gang with required hostname
anti-affinity, one rack required, beside a running pod its selector matches, went to the other rack in
the service but put a worker on the running pod's node in `plan` (issue 29)."""
from __future__ import annotations

import copy
import json

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from app.cli import main
from topology.demo import demo_objects

from service_helpers import filter_, indexed_job, job_pods as job_pods_of, job_with_affinity, make_client, plain_pod, schedule

APP = {"app": "serve"}
HOSTNAME = "kubernetes.io/hostname"
RACK = "network.example.com/rack"


def gang(pods: int, gpus: int, required: str, field: str, key: str, selector: dict) -> tuple[dict, list[dict]]:
    """An Indexed Job whose pods carry APP and one required pod (anti-)affinity term."""
    job = indexed_job("serve", pods=pods, gpus=gpus, segment=None, required=required)
    term = {field: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": selector}, "topologyKey": key}]}}
    return job_with_affinity(job, APP, term)


def running(name: str, node: str, labels: dict, gpus: int = 0) -> dict:
    pod = plain_pod(name, gpus=gpus, cpu="1", namespace="team-a")     # the terms name no namespace: the gang's
    pod["metadata"]["labels"] = labels
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    return pod


def nodes(count: int) -> list[dict]:
    """The demo cluster's topologies and its first `count` nodes (racks of 4), no pods."""
    objects = [o for o in demo_objects() if o["kind"] != "Pod"]
    kept = [o for o in objects if o["kind"] == "Node"][:count]
    return [o for o in objects if o["kind"] != "Node"] + kept


def by_service(cluster: list[dict], job: dict, pods: list[dict]) -> dict[int, str] | None:
    """Each pod index -> the node the service binds it to; None when the gang is refused."""
    client = make_client(job, objects=cluster)
    if not filter_(client, pods[0])["NodeNames"]:
        return None                          # the first pod's filter plans the whole gang, or refuses it
    return {index: schedule(client, pod) for index, pod in enumerate(pods)}


def by_plan(tmp_path, capsys, cluster: list[dict], job: dict) -> dict[int, str] | None:
    """Each pod index -> the node `tas-extender plan` puts it on; None when it does not place the gang."""
    cluster_file, workload_file = tmp_path / "cluster.yaml", tmp_path / "workload.yaml"
    cluster_file.write_text(yaml.safe_dump_all(cluster))
    workload_file.write_text(yaml.safe_dump(job))
    code = main(["plan", "--cluster", str(cluster_file), "--workload", str(workload_file), "-o", "json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    (planned,) = json.loads(out)["gangs"]
    return {pod["index"]: pod["node"] for pod in planned["pods"]} if planned["placed"] else None


def test_plan_and_the_service_put_the_issue_gang_in_the_same_rack(tmp_path, capsys):
    """The issue's gang: 4 pods, one per host (required hostname anti-affinity), one rack required, beside a
    running pod its selector matches on node-01 (rack 1): rack 1 has 3 hosts left, so both go to rack 2."""
    job, pods = gang(4, 2, "rack", "podAntiAffinity", HOSTNAME, APP)
    cluster = nodes(8) + [running("other", "node-01", dict(APP))]
    service = by_service(copy.deepcopy(cluster), job, pods)
    planned = by_plan(tmp_path, capsys, copy.deepcopy(cluster), job)
    assert service is not None and "node-01" not in service.values()
    assert planned == service


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_plan_and_the_service_agree_on_random_clusters(tmp_path, capsys, data):
    """Random clusters of 4 to 12 nodes with random running pods (some matching the gang's selector, some
    using GPUs), a gang with a random (anti-)affinity term on the hostname or the rack, a random required
    level: `plan` places it exactly where the service binds it, or both refuse it."""
    count = data.draw(st.integers(4, 12), label="nodes")
    cluster = nodes(count)
    names = [o["metadata"]["name"] for o in cluster if o["kind"] == "Node"]
    others = []
    for number in range(data.draw(st.integers(0, 4), label="running pods")):
        labels = data.draw(st.sampled_from([dict(APP), {"app": "other"}]), label="labels")
        gpus = data.draw(st.sampled_from([0, 2, 4, 8]), label="gpus used")
        others.append(running(f"run-{number}", data.draw(st.sampled_from(names), label="node"), labels, gpus))
    field = data.draw(st.sampled_from(["podAntiAffinity", "podAffinity"]), label="term")
    key = data.draw(st.sampled_from([HOSTNAME, RACK]), label="key")
    selector = data.draw(st.sampled_from([dict(APP), {"app": "other"}]), label="selector")
    job, pods = gang(data.draw(st.integers(1, 4), label="pods"), data.draw(st.sampled_from([1, 2, 4, 8])),
                     data.draw(st.sampled_from(["rack", "block", "zone"]), label="required"), field, key, selector)
    cluster += others
    service = by_service(copy.deepcopy(cluster), job, pods)
    planned = by_plan(tmp_path, capsys, copy.deepcopy(cluster), job)
    assert planned == service


def test_plan_and_the_service_count_gpus_from_a_claim_template_alike(tmp_path, capsys):
    """A 4-pod gang whose pods get 8 DRA GPUs each from a ResourceClaimTemplate, on 8 nodes of 8 DRA GPUs:
    both put one pod per node in one rack (before, both stacked the gang on one node as 4 x 1 cpu)."""
    from topology.demo import DRA_GPU_CLASS, dra_node, dra_slice
    cluster = [dra_node(o) if o["kind"] == "Node" else o for o in nodes(8)]
    cluster += [dra_slice(o["metadata"]["name"]) for o in cluster if o["kind"] == "Node"] + [copy.deepcopy(DRA_GPU_CLASS)]
    cluster.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "gpu-8", "namespace": "team-a"},
                    "spec": {"spec": {"devices": {"requests": [
                        {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}}]}}}})
    job = indexed_job("serve", pods=4, gpus=0, segment=None, required="rack")
    spec = job["spec"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "gpu-8"}]
    pods = job_pods_of(job)
    service = by_service(copy.deepcopy(cluster), job, pods)
    planned = by_plan(tmp_path, capsys, copy.deepcopy(cluster), job)
    assert service is not None and len(set(service.values())) == 4, service
    assert planned == service
