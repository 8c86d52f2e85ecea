"""Training gangs on the real control plane: the seed TFJob, a LimitRange default, a restart and a node
turning NotReady mid-gang (issue 12 scenarios 1, 5, 7 and 8)."""
from __future__ import annotations

from workloads import (BLOCK, ELSEWHERE, HOST, RACK, THREE_RACKS, ZONE, assert_no_node_over, distinct, gated_gang,
                       indexed_job, plan_slots, release, tfjob, topology)

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


def test_pod_level_cpu_requests_are_what_the_gang_is_planned_with(cluster, ns):
    """8 pods of 1 GPU, 16 CPUs each asked for the whole pod (spec.resources, PodLevelResources, on by
    default since v1.34) and none by the container; one rack required. Rack x is one node of 8 GPUs and 32
    CPUs: the tightest rack by GPUs, but by CPU it holds 2 of the pods, and a gang planned there would be
    stuck after its first 2 bindings. Rack y (4 nodes of 64 CPUs) holds them all."""
    job = indexed_job("podlevel", 8, 1, topology(required="rack"))
    job["spec"]["template"]["spec"]["resources"] = {"requests": {"cpu": "16"}}
    ns.add_nodes({"x0": ("zone-a", "block-a", "rack-x")}, cpu="32")
    ns.add_nodes({f"y{i}": ("zone-a", "block-a", "rack-y") for i in range(4)}, cpu="64")
    ns.apply(job)
    bound = cluster.wait_bound(ns.name, 8, "job-name=podlevel")
    assert distinct(cluster, bound, RACK) == {f"{ns.name}-rack-y"}
    assert all(pod.spec.resources.requests["cpu"] == "16" for pod in bound)     # as admitted


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
