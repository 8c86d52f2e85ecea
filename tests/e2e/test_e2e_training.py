"""Training gangs on the real control plane: the seed TFJob, a LimitRange default, a restart and a node
turning NotReady mid-gang (issue 12 scenarios 1, 5, 7 and 8)."""
from __future__ import annotations

import json
import ssl
import urllib.request

from workloads import (BLOCK, HOST, RACK, ZONE, assert_no_node_over, container, distinct, indexed_job, segments,
                       topology)

GATE = "e2e.example.com/hold"


def tfjob(name: str, workers: int, annotations: dict) -> dict:
    def replica(count: int, gpus: int = 0, cpu: str | None = None, template_annotations: dict | None = None):
        spec = {"schedulerName": "tas-scheduler", "restartPolicy": "Never", "containers": [container(gpus, cpu)]}
        return {"replicas": count, "template": {"metadata": {"annotations": template_annotations or {}},
                                                "spec": spec}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name, "annotations": annotations},
            "spec": {"tfReplicaSpecs": {"Chief": replica(1, gpus=4), "PS": replica(2, cpu="2"),
                                        "Worker": replica(workers, gpus=8, template_annotations=segments(4, "rack"))}}}


def test_seed_tfjob_lands_whole_in_one_zone_with_workers_in_rack_segments(cluster, ns):
    """1 Chief (4 GPUs), 2 PS (CPU only, on untainted CPU nodes), 16 Workers (8 GPUs) in segments of 4 on
    racks; zone a is the only zone with room for all of it."""
    ns.add_nodes({f"a{r}{n}": ("zone-a", f"block-a{r // 3}", f"rack-a{r}") for r in range(5) for n in range(4)})
    ns.add_nodes({f"b{r}{n}": ("zone-b", "block-b", f"rack-b{r}") for r in range(2) for n in range(4)})
    ns.add_nodes({f"cpu{n}": ("zone-a", "block-a-cpu", "rack-a-cpu") for n in range(2)}, gpus=0, taint=False)
    ns.add_nodes({f"cpub{n}": ("zone-b", "block-b-cpu", "rack-b-cpu") for n in range(2)}, gpus=0, taint=False)
    cluster.create_with_pods(ns.name, tfjob("seed", 16, topology(required="zone")))
    bound = cluster.wait_bound(ns.name, 19, timeout=90)
    assert distinct(cluster, bound, ZONE) == {f"{ns.name}-zone-a"}
    role = {p.metadata.name: p.metadata.labels["training.kubeflow.org/replica-type"] for p in bound}
    workers = sorted((p for p in bound if role[p.metadata.name] == "worker"),
                     key=lambda p: int(p.metadata.labels["training.kubeflow.org/replica-index"]))
    for segment in range(4):
        members = workers[segment * 4:segment * 4 + 4]
        assert len(distinct(cluster, members, RACK)) == 1, f"worker segment {segment} spans racks"
        for rank, pod in enumerate(members):
            env = {e.name: e for c in pod.spec.containers for e in (c.env or [])}
            assert (env["KAI_SEGMENT_INDEX"].value, env["KAI_SEGMENT_RANK"].value,
                    env["KAI_NUM_SEGMENTS"].value) == (str(segment), str(rank), "4")
            # KAI_TOPOLOGY_RACK is filled by the kubelet from the annotation the bind wrote
            assert "placement.tas-extender.io/rack" in env["KAI_TOPOLOGY_RACK"].value_from.field_ref.field_path
            assert pod.metadata.annotations["placement.tas-extender.io/rack"] == distinct(cluster, [pod], RACK).pop()
    ps_nodes = distinct(cluster, [p for p in bound if role[p.metadata.name] == "ps"], HOST)
    assert ps_nodes <= {f"{ns.name}-cpu0", f"{ns.name}-cpu1"}
    assert_no_node_over(cluster, 8)


def test_limitrange_default_cpu_still_lands_the_gang_within_cpu_allocatable(cluster, ns):
    """The template asks for no CPU; a LimitRange gives each pod 16. Nodes have 32 CPUs and 8 GPUs, so the
    pods' GPUs (1 each) would pack 8 on a node, but only 2 fit by CPU."""
    ns.apply({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "cpu-default"},
              "spec": {"limits": [{"type": "Container", "default": {"cpu": "16"},
                                   "defaultRequest": {"cpu": "16"}}]}})
    ns.add_nodes({f"n{i}": ("zone-a", "block-a", f"rack-a{i // 4}") for i in range(8)}, cpu="32")
    ns.apply(indexed_job("small", 8, 1, topology(required="rack")))
    bound = cluster.wait_bound(ns.name, 8, "job-name=small")
    assert len(distinct(cluster, bound, RACK)) == 1
    per_node: dict[str, int] = {}
    for pod in bound:
        per_node[pod.spec.node_name] = per_node.get(pod.spec.node_name, 0) + 1
    assert max(per_node.values()) <= 2, per_node


def gated_gang(cluster, ns, name: str, held: range) -> list[str]:
    """An 8-pod x 8-GPU TFJob gang (block, segments of 4 on racks) whose workers in `held` carry a scheduling
    gate: the others are planned with the whole gang and bind; the held ones wait for `release`."""
    job = tfjob(name, 8, topology(required="block"))
    del job["spec"]["tfReplicaSpecs"]["Chief"], job["spec"]["tfReplicaSpecs"]["PS"]
    original = cluster.create_pods
    names = []

    def gate_some(namespace, pods, **kwargs):
        # the held pods first: the last pod created is one the scheduler may place, and its binding is the
        # event that sends the gang's earlier (refused: "waiting for more pods") pods back to scheduling
        pods = sorted(pods, key=lambda pod: int(pod["metadata"]["labels"][
            "training.kubeflow.org/replica-index"]) not in held)
        for pod in pods:
            names.append(pod["metadata"]["name"])
            if int(pod["metadata"]["labels"]["training.kubeflow.org/replica-index"]) in held:
                pod["spec"]["schedulingGates"] = [{"name": GATE}]
        original(namespace, pods, **kwargs)
    cluster.create_pods = gate_some
    try:
        cluster.create_with_pods(ns.name, job)
    finally:
        del cluster.create_pods
    return [n for n in names if int(n.rsplit("-", 1)[1]) in held]


def release(cluster, ns, pods: list[str]) -> None:
    for name in pods:
        cluster.core.patch_namespaced_pod(name, ns.name, {"spec": {"schedulingGates": None}})


def plan_slots(cluster, gang_namespace: str) -> dict[str, str]:
    """The extender's plan for the namespace's gang: pod slot -> planned node (from the debug API)."""
    context = ssl.create_default_context(cafile=str(cluster.plane.certs.ca_crt))
    with urllib.request.urlopen(f"{cluster.url}/debug/plans", context=context, timeout=5) as answer:
        plans = [p for p in json.load(answer)["plans"] if p["gang"].startswith(f"{gang_namespace}/")]
    (plan,) = plans
    namespace, name = plan["gang"].split("/", 1)
    with urllib.request.urlopen(f"{cluster.url}/debug/plans/{namespace}/{name}", context=context,
                                timeout=5) as answer:
        return {s["slot"]: s["node"] for s in json.load(answer)["slots"]}


THREE_RACKS = {f"{r}{n}": ("zone-a", "block-a", f"rack-{r}") for r in "xyz" for n in range(4)}
ELSEWHERE = {f"o{n}": ("zone-a", "block-o", "rack-o") for n in range(4)}


def test_restart_mid_gang_completes_in_the_same_domains(cluster, ns):
    ns.add_nodes({**THREE_RACKS, **ELSEWHERE})
    held = gated_gang(cluster, ns, "restart", range(4, 8))
    first = cluster.wait_bound(ns.name, 4)
    leader = cluster.extender.leader()
    cluster.extender.kill(leader)
    cluster.extender.start(leader)
    cluster.extender.wait_leader()
    release(cluster, ns, held)
    bound = cluster.wait_bound(ns.name, 8, timeout=90)
    assert len(distinct(cluster, bound, BLOCK)) == 1
    assert distinct(cluster, first, BLOCK) == distinct(cluster, bound, BLOCK)
    later = [p for p in bound if p.metadata.name in held]
    assert len(distinct(cluster, later, RACK)) == 1
    assert len({p.spec.node_name for p in bound}) == 8
    assert_no_node_over(cluster, 8)


def test_node_turning_not_ready_mid_gang_moves_its_slot_inside_the_domain(cluster, ns):
    """The held segment's planned rack loses a node: the segment moves to the third rack of the block."""
    ns.add_nodes({**THREE_RACKS, **ELSEWHERE})
    held = gated_gang(cluster, ns, "notready", range(4, 8))
    cluster.wait_bound(ns.name, 4)
    planned = plan_slots(cluster, ns.name)
    broken = planned["worker-5"]
    cluster.set_ready(broken, False)
    release(cluster, ns, held)
    bound = cluster.wait_bound(ns.name, 8, timeout=90)
    assert broken not in {p.spec.node_name for p in bound}
    assert len(distinct(cluster, bound, BLOCK)) == 1
    assert len(distinct(cluster, [p for p in bound if p.metadata.name in held], RACK)) == 1
    assert_no_node_over(cluster, 8)
