"""Gang behaviour of the extender on the standalone demo cluster (2 zones x 2 blocks x 2 racks x 4 nodes
of 8 GPUs; node-16 NotReady, node-24 tainted, a few nodes busy)."""
from __future__ import annotations

import threading
from collections import Counter


from app.placement import TOPOLOGY_ANNOTATION, placement_annotation
from app.scheduling.engine import SCHEDULER_LAG_GRACE
from app.state import GANG_ANNOTATION, NODE_KIND, SLOT_ANNOTATION
from topology.demo import demo_objects

from demo_figures import demo_cluster, most_in_one
from service_helpers import (GPU, Clock, bind, domain_of, engine, failures, filter_, indexed_job, job_pods,
                             make_client, plain_pod, prioritize, refusal, schedule, service, watch)


def gpu_column(client):
    return service(client).cluster.resources.column[GPU]


def test_plain_pod_passes_through_with_neutral_scores():
    client = make_client()
    pod = plain_pod("web", cpu="2")
    names = service(client).cluster.node_names
    answer = filter_(client, pod)
    assert answer["NodeNames"] == names and answer["FailedNodes"] == {} and answer["Error"] == ""
    assert set(prioritize(client, pod).values()) == {5}
    assert bind(client, pod, "node-03") == ""
    assert service(client).find_pod("default", "web")["spec"]["nodeName"] == "node-03"


def test_first_pod_plans_and_reserves_the_whole_gang():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    pods = job_pods(job)
    free_before = service(client).cluster.free[:, gpu_column(client)].sum()
    answer = filter_(client, pods[0])
    assert len(answer["NodeNames"]) == 1
    plans = client.get("/debug/plans").json()
    assert plans["counts"]["planned"] == 1 and plans["reservations"] == 8
    gang = plans["plans"][0]["gang"]
    detail = client.get(f"/debug/plans/{gang}").json()
    assert detail["counts"] == {"planned": 8, "bound": 0, "unplaced": 0, "done": 0}
    assert detail["summary"] == "8 pods x 4 nvidia.com/gpu"
    assert free_before - service(client).cluster.free[:, gpu_column(client)].sum() == 32
    planned = {s["slot"]: s["node"] for s in detail["slots"]}
    assert answer["NodeNames"] == [planned["job-0"]] and answer["FailedNodes"] == {}


def test_gang_is_planned_and_bound_pod_by_pod_inside_its_domains():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    used_before = service(client).cluster.capacity.used[:, gpu_column(client)].sum()
    placed = {pod["metadata"]["name"]: schedule(client, pod) for pod in job_pods(job)}
    blocks = {domain_of(client, node, "block") for node in placed.values()}
    assert len(blocks) == 1                                   # the whole job in one block
    for segment in (range(0, 4), range(4, 8)):                # each segment of 4 in one rack
        assert len({domain_of(client, placed[f"llama-{i}"], "rack") for i in segment}) == 1
    state = service(client)
    assert state.plans.reservation_count() == 0
    assert state.cluster.capacity.used[:, gpu_column(client)].sum() - used_before == 32
    assert (state.cluster.free >= 0).all()
    detail = client.get(f"/debug/plans/{job['metadata']['namespace']}/pg-llama-uid-llama").json()
    assert detail["status"] == "bound" and detail["counts"]["bound"] == 8
    pod = state.find_pod("team-a", "llama-5")
    annotations = pod["metadata"]["annotations"]
    tree = state.cluster.topologies["default"]
    path = tree.node_path(state.cluster.node_index[placed["llama-5"]])
    assert [annotations[placement_annotation(level)] for level in tree.levels] == path
    assert annotations[TOPOLOGY_ANNOTATION] == "default"
    assert annotations[GANG_ANNOTATION] == "team-a/pg-llama-uid-llama" and annotations[SLOT_ANNOTATION] == "job-5"


def test_prioritize_gives_the_planned_node_ten_and_ranks_the_rest_by_hops():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    pod = job_pods(job)[2]
    planned = filter_(client, pod)["NodeNames"][0]
    scores = prioritize(client, pod)
    assert scores[planned] == 10
    assert all(0 <= s <= 10 for s in scores.values())
    others = {n: s for n, s in scores.items() if n != planned}
    assert max(others.values()) < 10
    rack = domain_of(client, planned, "rack")
    same_rack = [s for n, s in others.items() if domain_of(client, n, "rack") == rack]
    other_zone = [s for n, s in others.items() if domain_of(client, n, "zone") != domain_of(client, planned, "zone")]
    assert min(same_rack) > max(other_zone)


def test_refusal_names_the_gang_and_the_reason_said_once_for_every_node():
    job = indexed_job("huge", pods=16, gpus=8, required="block", segment=None)
    client = make_client(job)
    answer = filter_(client, job_pods(job)[0])
    assert answer["NodeNames"] == [] and answer["Error"] == ""
    assert len(failures(answer)) == 1           # unresolvable: the other nodes need no entry of their own
    message = refusal(answer)
    assert message.startswith("gang team-a/pg-huge-uid-huge (16 pods x 8 nvidia.com/gpu): ")
    nodes = len(service(client).cluster.nodes)
    assert message.endswith(f"(the same on all {nodes} nodes; see /debug/plans/team-a/pg-huge-uid-huge)")
    assert "block" in message
    assert service(client).plans.reservation_count() == 0
    assert client.get("/debug/plans").json()["counts"]["refused"] == 1


def test_reservations_expire_after_the_ttl():
    clock = Clock()
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job, clock=clock, reservation_ttl=60)
    state = service(client)
    free_before = state.cluster.free.copy()
    pods = job_pods(job)
    node = schedule(client, pods[0])
    assert state.plans.reservation_count() == 7
    clock.now += 30
    filter_(client, pods[1])                     # a pod of the gang arriving renews the TTL
    clock.now += 45
    assert state.expire() == []
    clock.now += 61
    assert state.expire() == ["team-a/pg-llama-uid-llama"]
    assert state.plans.reservation_count() == 0 and len(state.plans) == 0
    expected = free_before.copy()
    expected[state.cluster.node_index[node]] -= state.cluster.capacity.used[state.cluster.node_index[node]] - \
        (state.cluster.capacity.allocatable - free_before)[state.cluster.node_index[node]]
    assert (state.cluster.free == expected).all()          # only the bound pod still uses capacity
    assert b"tas_extender_reservations_expired_total 1.0" in client.get("/metrics").content


def test_the_filter_scans_reservations_for_their_ttl_at_most_once_a_second():
    """Every filter checks the TTLs, which reads every plan: at most once per EXPIRY_SCAN_INTERVAL."""
    from app.state.service import EXPIRY_SCAN_INTERVAL
    clock = Clock()
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job, clock=clock, reservation_ttl=60)
    state = service(client)
    schedule(client, job_pods(job)[0])
    clock.now += 60 - EXPIRY_SCAN_INTERVAL / 4
    state.expire_due()                                                # scanned: not due yet
    clock.now += EXPIRY_SCAN_INTERVAL / 2
    state.expire_due()                                                # due, but the last scan is too recent
    assert len(state.plans) == 1
    clock.now += EXPIRY_SCAN_INTERVAL / 2
    state.expire_due()
    assert len(state.plans) == 0


def test_bind_is_idempotent_and_refuses_another_node():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    pod = job_pods(job)[0]
    node = filter_(client, pod)["NodeNames"][0]
    assert bind(client, pod, node) == ""
    assert bind(client, pod, node) == ""
    other = next(n for n in service(client).cluster.node_names if n != node)
    assert "already bound to" in bind(client, pod, other)
    assert Counter(u.node for u in service(client).cluster.pods.values())[service(client).cluster.node_index[node]] >= 1
    assert len([k for k in service(client).cluster.pods if k == "team-a/llama-0"]) == 1


def test_unknown_pod_bind_reports_an_error():
    client = make_client()
    error = bind(client, plain_pod("ghost"), "node-03")
    assert "ghost" in error and "not in the extender's watched view" in error
    assert service(client).find_pod("default", "ghost") is None


def test_concurrent_binds_never_overcommit():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    pods = job_pods(job)
    nodes = {p["metadata"]["name"]: filter_(client, p)["NodeNames"][0] for p in pods}
    errors = []

    gangs = engine(client)

    def worker(pod):
        metadata = pod["metadata"]
        for _ in range(3):                       # retries of the same bind race each other, in threads
            errors.append(gangs.bind(metadata["namespace"], metadata["name"], metadata["uid"],
                                     nodes[metadata["name"]]))

    threads = [threading.Thread(target=worker, args=(p,)) for p in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(errors) == {""}
    state = service(client)
    assert (state.cluster.free >= 0).all()
    assert sum(1 for k in state.cluster.pods if k.startswith("team-a/llama-")) == 8
    assert state.plans.get("team-a/pg-llama-uid-llama").status == "bound"


def test_missing_planned_node_replans_inside_the_segment_domain():
    job = indexed_job("llama", pods=8, gpus=2)
    clock = Clock()
    client = make_client(job, strategy="spread", clock=clock)   # spread leaves room in the segment's rack
    pods = job_pods(job)
    planned = filter_(client, pods[1])["NodeNames"][0]
    rack = domain_of(client, planned, "rack")
    state = service(client)
    room = [n for n in state.cluster.node_names if n != planned and domain_of(client, n, "rack") == rack
            and state.cluster.free[state.cluster.node_index[n], gpu_column(client)] >= 2]
    assert room, "precondition: the rack has room for the moved pod"
    names = [n for n in service(client).cluster.node_names if n != planned]
    assert filter_(client, pods[1], names)["NodeNames"] == []          # kube-scheduler may only lag behind
    clock.now += SCHEDULER_LAG_GRACE                        # left out for longer than kube-scheduler's lag
    answer = filter_(client, pods[1], names)
    assert len(answer["NodeNames"]) == 1 and answer["NodeNames"][0] != planned
    assert domain_of(client, answer["NodeNames"][0], "rack") == rack
    notes = client.get("/debug/plans/team-a/pg-llama-uid-llama").json()["notes"]
    assert any("not among" in n for n in notes)


def test_missing_planned_node_replans_the_group_when_its_domain_is_full():
    job = indexed_job("llama", pods=8, gpus=4)             # fills one rack exactly
    clock = Clock()
    client = make_client(job, clock=clock)
    state = service(client)
    pods = job_pods(job)
    planned = filter_(client, pods[1])["NodeNames"][0]
    old_rack = domain_of(client, planned, "rack")
    names = [n for n in state.cluster.node_names if n != planned]
    filter_(client, pods[1], names)
    clock.now += SCHEDULER_LAG_GRACE
    answer = filter_(client, pods[1], names)
    assert len(answer["NodeNames"]) == 1
    plan = state.plans.get("team-a/pg-llama-uid-llama")
    racks = {domain_of(client, s.node, "rack") for s in plan.slots.values()}
    assert old_rack not in racks and len({domain_of(client, s.node, "block") for s in plan.slots.values()}) == 1
    assert state.plans.reservation_count() == 8
    assert int(state.cluster.capacity.reserved[:, gpu_column(client)].sum()) == 32


def test_planned_node_missing_from_candidates_moments_after_it_was_freed_keeps_the_plan():
    """kube-scheduler's cache trails our watch: right after victims or a finished job free a node, its
    filter may not offer that node yet. The slot waits for it instead of re-planning among the nodes that
    happen to be offered (which, after a preemption, would scatter the gang or refuse it)."""
    job = indexed_job("llama", pods=8, gpus=4)
    clock = Clock()
    client = make_client(job, clock=clock)
    state = service(client)
    pods = job_pods(job)
    planned = filter_(client, pods[1])["NodeNames"][0]
    plan = state.plans.get("team-a/pg-llama-uid-llama")
    before = {s: st.node for s, st in plan.slots.items()}
    others = [n for n in state.cluster.node_names if n != planned]
    answer = filter_(client, pods[1], others)
    assert answer["NodeNames"] == []
    assert "does not offer yet" in answer["FailedNodes"][others[0]]
    assert {s: st.node for s, st in plan.slots.items()} == before and not plan.notes
    clock.now += SCHEDULER_LAG_GRACE / 2
    assert filter_(client, pods[1])["NodeNames"] == [planned]      # offered again: steered there
    assert not plan.lagging


def _node_object(client, name):
    return next(o for o in service(client).objects.list("Node") if o["metadata"]["name"] == name)


def llama_started(job: dict | None = None):
    """The 8-pod llama gang (or `job`) planned with its pod 0 scheduled: (client, its pods, pod 0's node,
    the plan)."""
    job = job or indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    pods = job_pods(job)
    first = schedule(client, pods[0])
    return client, pods, first, service(client).plans.get("team-a/pg-llama-uid-llama")


def test_node_turning_not_ready_replans_unbound_slots_in_the_same_domain():
    client, pods, first, plan = llama_started()
    state = service(client)
    victim_slot = next(s for s in plan.slots.values() if s.status == "planned" and s.node != first)
    victim_node, block = victim_slot.node, domain_of(client, victim_slot.node, "block")
    node = _node_object(client, victim_node)
    broken = {**node, "status": {**node["status"], "conditions": [{"type": "Ready", "status": "False"}]}}
    state.apply(NODE_KIND, "MODIFIED", broken)
    moved = plan.slots[victim_slot.slot]
    assert moved.node != victim_node and moved.status == "planned" and moved.reserved
    assert domain_of(client, moved.node, "block") == block
    segment = [s.node for s in plan.slots.values() if (s.slot.index < 4) == (victim_slot.slot.index < 4)]
    assert len({domain_of(client, n, "rack") for n in segment}) == 1
    assert not any(s.node == victim_node for s in plan.slots.values() if s.status != "bound")
    assert state.cluster.capacity.reserved[state.cluster.node_index[victim_node]].sum() == 0
    assert any(victim_node in note for note in plan.notes)
    for pod in pods[1:]:
        assert schedule(client, pod) != victim_node


def test_gpu_tainted_node_turning_not_ready_replans_its_slots():
    """GPU node pools taint every node (nvidia.com/gpu=present:NoSchedule) and the gang tolerates it: a node
    that is tainted all along and then turns NotReady must still lose its planned slots."""
    job = indexed_job("llama", pods=8, gpus=4)
    job["spec"]["template"]["spec"]["tolerations"] = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    client, _, first, plan = llama_started(job)
    state = service(client)
    victim = next(s for s in plan.slots.values() if s.status == "planned" and s.node != first)
    slot, victim_node = victim.slot, victim.node
    node = _node_object(client, victim_node)
    tainted = {**node, "spec": {**(node.get("spec") or {}),
                                "taints": [{"key": GPU, "value": "present", "effect": "NoSchedule"}]}}
    state.apply(NODE_KIND, "MODIFIED", tainted)
    assert plan.slots[slot].node == victim_node                 # a taint the gang tolerates changes nothing
    broken = {**tainted, "status": {**tainted["status"], "conditions": [{"type": "Ready", "status": "False"}]}}
    state.apply(NODE_KIND, "MODIFIED", broken)
    assert plan.slots[slot].node != victim_node
    assert not any(s.node == victim_node for s in plan.slots.values() if s.status != "bound")


def test_deleted_node_is_replanned_and_bound_pods_there_are_reported():
    client, _, first, plan = llama_started()
    state = service(client)
    state.apply(NODE_KIND, "MODIFIED", {**_node_object(client, first), "spec": {"taints": [
        {"key": "gpu-broken", "effect": "NoSchedule"}]}})
    assert any("bound pod team-a/llama-0" in note and first in note for note in plan.notes)
    other = next(s for s in plan.slots.values() if s.status == "planned")
    gone = other.node
    state.apply(NODE_KIND, "DELETED", _node_object(client, gone))
    state.refresh()
    assert gone not in state.cluster.node_index
    assert all(s.node != gone for s in plan.slots.values())
    assert all(s.status in ("planned", "bound") for s in plan.slots.values())


def test_deleted_pod_frees_capacity_and_its_replacement_returns_to_its_domain():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    state = service(client)
    pods = job_pods(job)
    placed = {p["metadata"]["name"]: schedule(client, p) for p in pods}
    from app.state import POD_KIND
    gone = state.find_pod("team-a", "llama-6")
    state.apply(POD_KIND, "DELETED", gone)
    assert "team-a/llama-6" not in state.cluster.pods
    plan = state.plans.get("team-a/pg-llama-uid-llama")
    assert plan.status == "planned"
    replacement = {**job_pods(job)[6]}
    replacement["metadata"] = {**replacement["metadata"], "uid": "uid-llama-6-second"}
    node = schedule(client, replacement)
    assert domain_of(client, node, "rack") == domain_of(client, placed["llama-6"], "rack")
    assert plan.status == "bound"


def test_plain_pod_cannot_take_reserved_capacity():
    job = indexed_job("llama", pods=8, gpus=8, required="zone", segment=None)
    client = make_client(job)
    filter_(client, job_pods(job)[0])
    state = service(client)
    reserved_nodes = {state.cluster.node_names[u.node] for u in state.cluster.reservations.values()}
    answer = filter_(client, plain_pod("greedy", gpus=8))
    assert reserved_nodes and not reserved_nodes & set(answer["NodeNames"])
    assert all("reserved for gang team-a/pg-llama-uid-llama" in answer["FailedNodes"][n] for n in reserved_nodes)
    small = filter_(client, plain_pod("tiny", cpu="1"))
    assert set(small["NodeNames"]) >= reserved_nodes            # room besides the reservation is usable


def test_restart_rebuilds_partly_bound_gangs_from_annotations():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    pods = job_pods(job)
    placed = [schedule(client, p) for p in pods[:3]]
    state = service(client)
    snapshot = [o for kind in ("Node", "Pod", "Topology", "Job") for o in state.objects.list(kind)]
    snapshot += [o for kind in ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")
                 for o in state.objects.list(kind, "resource.k8s.io")]      # the demo's DRA rack
    block = domain_of(client, placed[0], "block")
    restarted = make_client(objects=snapshot)
    new_state = service(restarted)
    plan = new_state.plans.get("team-a/pg-llama-uid-llama")
    assert plan is not None and plan.counts() == {"planned": 5, "bound": 3, "unplaced": 0, "done": 0}
    assert any("restored" in n for n in plan.notes)
    for pod in pods[3:]:
        assert domain_of(restarted, schedule(restarted, pod), "block") == block
    assert (new_state.cluster.free >= 0).all()
    per_node = Counter(new_state.cluster.pods[f"team-a/llama-{i}"].node for i in range(8))
    gpus = new_state.cluster.capacity.allocatable[:, new_state.cluster.resources.column[GPU]]
    assert all(count * 4 <= gpus[node] for node, count in per_node.items())


def test_preempt_keeps_only_the_planned_node_for_a_gang_pod_and_echoes_plain_pods():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    pod = job_pods(job)[0]
    planned = filter_(client, pod)["NodeNames"][0]
    victims = {n: {"Pods": [{"UID": f"victim-{n}"}], "NumPDBViolations": 0} for n in ("node-01", "node-17", planned)}
    body = {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims}
    answer = client.post("/scheduler/preempt", json=body).json()
    assert answer == {"NodeNameToMetaVictims": {planned: victims[planned]}}
    watch(client, plain_pod("web"))
    plain = client.post("/scheduler/preempt", json={**body, "Pod": plain_pod("web")}).json()
    assert plain == {"NodeNameToMetaVictims": victims}
    off = make_client(job, preemption="off")
    filter_(off, pod)
    assert off.post("/scheduler/preempt", json=body).json() == {"NodeNameToMetaVictims": {}}


def test_preempt_for_a_refused_gang_keeps_nodes_whose_victims_make_it_fit():
    objects = demo_objects()
    job = indexed_job("big", pods=8, gpus=8, required="block", segment=None)
    client = make_client(job, objects=objects)
    engine(client).preemptor = None    # the fallback without preemption (equal priorities here)
    pod = job_pods(job)[0]
    answer = filter_(client, pod)
    assert most_in_one(demo_cluster(), "block") < 8
    assert answer["NodeNames"] == []          # no block has 8 free 8-GPU nodes (busy or broken nodes)
    state = service(client)
    busy = {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in state.objects.list("Pod")
            if p["spec"].get("nodeName") in ("node-25", "node-26")}
    victims = {node: {"Pods": [{"UID": uid}], "NumPDBViolations": 0} for uid, node in busy.items()}
    victims["node-01"] = {"Pods": [{"UID": "demo-inference-0"}], "NumPDBViolations": 0}
    kept = client.post("/scheduler/preempt", json={"Pod": pod, "NodeNameToMetaVictims": victims}).json()
    assert set(kept["NodeNameToMetaVictims"]) == {"node-25", "node-26"}


def test_podgroup_gang_with_subgroups_lands_in_its_required_domains():
    from grouper_helpers import load
    docs = load("podgroup-disaggregated.yaml")
    podgroup, pods = docs[0], [d for d in docs if d["kind"] == "Pod"]
    for pod in pods:
        pod["metadata"]["uid"] = "uid-" + pod["metadata"]["name"]
        pod["status"] = {"phase": "Pending"}
    client = make_client(podgroup, *pods)               # the pods exist before scheduling, as in a cluster
    placed, left_out = {}, []
    for pod in pods:
        answer = filter_(client, pod)
        if not answer["NodeNames"]:                     # prefill needs 3 of its 4 subgroups: one may wait
            assert "elastic pods" in refusal(answer)
            left_out.append(pod["metadata"]["name"])
            continue
        assert bind(client, pod, answer["NodeNames"][0]) == ""
        placed[pod["metadata"]["name"]] = answer["NodeNames"][0]
    assert all(name.startswith("disagg-prefill-") for name in left_out) and len(left_out) <= 2
    plan = client.get("/debug/plans/serving/disagg-inference").json()
    assert plan["counts"]["bound"] == len(placed) == len(pods) - len(left_out)
    assert len({domain_of(client, n, "zone") for n in placed.values()}) == 1
    decode = [n for name, n in placed.items() if "decode" in name]
    assert len(decode) == 4 and len({domain_of(client, n, "block") for n in decode}) == 1
    prefill_groups = 0
    for group in ("prefill-0", "prefill-1", "prefill-2", "prefill-3"):
        nodes = [n for name, n in placed.items() if name.startswith(f"disagg-{group}-")]
        prefill_groups += bool(nodes)
        assert len({domain_of(client, n, "rack") for n in nodes}) <= 1
    assert prefill_groups >= 3
    assert (service(client).cluster.free >= 0).all()


def test_a_gang_pod_cannot_bind_away_from_its_planned_node():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    pod = job_pods(job)[3]
    planned = filter_(client, pod)["NodeNames"][0]
    elsewhere = "node-20" if planned != "node-20" else "node-21"
    error = bind(client, pod, elsewhere)
    assert f"is planned on {planned}, not {elsewhere}" in error
    assert not service(client).find_pod("team-a", "llama-3")["spec"].get("nodeName")
    assert bind(client, pod, planned) == ""


def test_a_pod_relist_reconciles_plans_with_what_is_bound():
    from app.state import POD_KIND
    client, pods, first, plan = llama_started()
    state = service(client)
    # a relist (after 410 Gone) shows llama-0 gone, and llama-1 bound by someone else's view of our bind
    listed = [p for p in state.objects.list("Pod") if p["metadata"]["name"] != "llama-0"]
    slot1 = next(s for s in plan.slots.values() if s.slot.index == 1)
    bound1 = {**state.find_pod("team-a", "llama-1")} if state.find_pod("team-a", "llama-1") else dict(pods[1])
    bound1 = {**bound1, "metadata": {**bound1["metadata"], "annotations": {
        "tas-extender.io/gang": plan.key, "tas-extender.io/slot": "job-1"}},
        "spec": {**bound1["spec"], "nodeName": slot1.node}, "status": {"phase": "Running"}}
    state.replace(POD_KIND, listed + [bound1])
    slot0 = next(s for s in plan.slots.values() if s.slot.index == 0)
    assert slot0.status == "planned" and slot0.node == first and slot0.reserved
    assert slot1.status == "bound" and not slot1.reserved
    assert state.cluster.capacity.reserved[state.cluster.node_index[slot1.node]].sum() >= 0
    assert (state.cluster.free >= 0).all()


def test_harmless_node_changes_leave_the_plan_alone():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    state = service(client)
    filter_(client, job_pods(job)[0])
    plan = state.plans.get("team-a/pg-llama-uid-llama")
    before = {s: st.node for s, st in plan.slots.items()}
    node = _node_object(client, before[next(iter(before))])
    soft = {**node, "spec": {"taints": [{"key": "prefer-not", "effect": "PreferNoSchedule"}]},
            "metadata": {**node["metadata"], "annotations": {"note": "heartbeat"}}}
    state.apply(NODE_KIND, "MODIFIED", soft)
    assert {s: st.node for s, st in plan.slots.items()} == before
    assert all(st.reserved for st in plan.slots.values()) and not plan.notes


def test_owner_not_watched_or_not_seen_yet():
    client = make_client()
    deployment_pod = plain_pod("web-abc")
    deployment_pod["metadata"]["annotations"] = {"kai.scheduler/topology": "default"}
    deployment_pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                                      "name": "web-5d8", "uid": "rs", "controller": True}]
    assert filter_(client, deployment_pod)["NodeNames"] == service(client).cluster.node_names
    job = indexed_job("late", pods=2, gpus=1)
    answer = filter_(client, job_pods(job)[0])          # the Job has not reached the watch yet
    assert answer["NodeNames"] == []
    assert "Job team-a/late of pod team-a/late-0 is not known to the extender yet" in \
        next(iter(answer["FailedAndUnresolvableNodes"].values()))


def test_succeeded_pods_finish_their_slots_and_a_finished_gang_is_forgotten():
    from app.state import POD_KIND
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    state = service(client)
    for pod in job_pods(job):
        schedule(client, pod)
    reserved_before = state.cluster.capacity.reserved.sum()
    for i in range(8):
        pod = state.find_pod("team-a", f"llama-{i}")
        state.apply(POD_KIND, "MODIFIED", {**pod, "status": {"phase": "Succeeded"}})
        plan = state.plans.get("team-a/pg-llama-uid-llama")
        if i < 7:
            assert plan.counts()["done"] == i + 1 and plan.status == "bound"
    assert state.plans.get("team-a/pg-llama-uid-llama") is None          # finished: nothing held for it
    assert state.cluster.capacity.reserved.sum() == reserved_before == 0
    assert not any(k.startswith("team-a/llama-") for k in state.cluster.pods)


def test_a_succeeded_slot_is_never_planned_or_reserved_again_when_its_gang_replans():
    """Found by tests/app/scheduling/test_service_stateful.py: a pod of the gang Succeeded, then another scheduler's pod
    took a node the gang had reserved. The re-plan treated the done slot as one to place: it reserved
    room for an index that never comes back (the Job controller does not recreate a succeeded pod)."""
    from app.state import POD_KIND
    from app.state.plans import DONE
    big = indexed_job("big", pods=10, gpus=8, required="zone", segment=None)
    small = indexed_job("small", pods=4, gpus=2, required="rack", segment=2)
    clock = Clock()
    client = make_client(big, small, clock=clock, reservation_ttl=300)
    state = service(client)
    pods = {pod["metadata"]["name"]: pod for job in (big, small) for pod in job_pods(job)}

    def run(name: str) -> None:
        schedule(client, pods[name])
        pods[name] = {**state.find_pod("team-a", name), "status": {"phase": "Running"}}
        state.apply(POD_KIND, "MODIFIED", pods[name])

    run("big-0")
    clock.now += 301
    state.expire(clock.now)                  # the plan is dropped; the next one pins big-0 where it runs
    for name in ("big-1", "small-1", "big-8", "big-2"):
        run(name)
    state.apply(POD_KIND, "MODIFIED", {**pods["big-0"], "status": {"phase": "Succeeded"}})
    plan = state.plans.get("team-a/pg-big-uid-big")
    done = plan.slots[next(s for s in plan.slots if s.index == 0)]
    assert done.status == DONE and not done.reserved
    other = plain_pod("web-1", gpus=2)
    other["spec"]["nodeName"], other["status"] = "node-27", {"phase": "Running"}
    state.apply(POD_KIND, "ADDED", other)    # bound by another scheduler on room the gang had reserved

    assert done.status == DONE and not done.reserved
    held = {key for key in state.cluster.reservations if key.startswith(f"gang:{plan.key}#")}
    assert held == {f"gang:{plan.key}#{s.slot}" for s in plan.slots.values() if s.reserved}
    assert all(s.status == "planned" for s in plan.slots.values() if s.reserved)
    assert (state.cluster.free >= 0).all()


def _one_scheduled(job: dict, index: int, phase: str):
    """(client, state, node, pod): the job's pod `index` scheduled, then reported in `phase` by the watch
    as the API server has it (bound, with our annotations)."""
    from app.state import POD_KIND
    client = make_client(job)
    state = service(client)
    pod = job_pods(job)[index]
    node = schedule(client, pod)
    pod = {**state.find_pod(pod["metadata"]["namespace"], pod["metadata"]["name"]), "status": {"phase": phase}}
    state.apply(POD_KIND, "MODIFIED", pod)
    return client, state, node, pod


def test_a_bound_pod_collected_with_its_deleted_node_leaves_its_slot_planned_elsewhere_and_held_once(monkeypatch):
    """Found by tests/app/scheduling/test_service_stateful.py: a node was deleted (the model only marked stale), then the
    pod garbage collector deleted the gang pod bound there. Freeing its slot read the model, which rebuilt
    itself in the middle of that event and re-planned the slot; the event then carried on with the old
    node and left the slot unplaced yet reserved: room held that nothing would ever use."""
    import app.state.service as service_module
    from app.state import NODE_KIND, POD_KIND
    monkeypatch.setattr(service_module, "STALE_REBUILD_DELAY", 3600.0)     # rebuilt by refresh(), not by a timer
    client, state, node, bound = _one_scheduled(indexed_job("zonal", pods=6, gpus=8, required="zone", segment=None),
                                                2, "Running")
    node_object = next(o for o in state.objects.list("Node") if o["metadata"]["name"] == node)

    state.apply(NODE_KIND, "DELETED", node_object)
    state.apply(POD_KIND, "DELETED", bound)

    plan = state.plans.get("team-a/pg-zonal-uid-zonal")
    state.refresh()                                                        # rebuilt now
    assert node not in state.cluster.node_index
    slot = plan.slots[next(s for s in plan.slots if s.index == 2)]
    assert slot.status == "planned" and slot.reserved and slot.node != node
    held = {key for key in state.cluster.reservations if key.startswith(f"gang:{plan.key}#")}
    assert held == {f"gang:{plan.key}#{s.slot}" for s in plan.slots.values() if s.reserved}
    assert all(s.status == "planned" for s in plan.slots.values() if s.reserved)
    assert (state.cluster.free >= 0).all()


def test_a_new_pod_for_a_finished_slot_is_placed_with_its_gang_not_on_the_old_node():
    """Found by tests/app/scheduling/test_service_stateful.py: a pod succeeded, its node was deleted (the gang moved to
    another rack) and came back, and a new pod for the same index was steered to the finished slot's old
    node, outside the rack the gang requires."""
    import copy
    from app.state import NODE_KIND, POD_KIND
    job = indexed_job("small", pods=4, gpus=2, required="rack", segment=2)
    client, state, old_node, done = _one_scheduled(job, 1, "Succeeded")
    nodes = {o["metadata"]["name"]: copy.deepcopy(o) for o in state.objects.list("Node")}
    for name, node in nodes.items():                       # the rest of its rack cannot take the gang
        if name != old_node and domain_of(client, name, "rack") == domain_of(client, old_node, "rack"):
            state.apply(NODE_KIND, "MODIFIED", {**node, "spec": {"unschedulable": True}})
    node_object = nodes[old_node]
    state.apply(NODE_KIND, "DELETED", node_object)
    state.apply(POD_KIND, "DELETED", done)                  # the pod garbage collector
    state.refresh()                                        # rebuilt: the gang's other slots move racks
    state.apply(NODE_KIND, "ADDED", node_object)
    plan = state.plans.get("team-a/pg-small-uid-small")
    racks = {domain_of(client, s.node, "rack") for s in plan.slots.values() if s.status == "planned"}
    assert len(racks) == 1 and domain_of(client, old_node, "rack") not in racks

    again = copy.deepcopy(job_pods(job)[1])
    again["metadata"]["name"], again["metadata"]["uid"] = "small-1-again", "uid-small-1-again"
    state.apply(POD_KIND, "ADDED", again)
    node = schedule(client, again)
    assert domain_of(client, node, "rack") in racks


def test_an_indexed_job_in_waves_places_its_second_wave_after_the_first_succeeded():
    """completions 8, parallelism 4: the Job controller creates indexes 4-7 as 0-3 succeed. A change that
    kept the first wave's slots finished for good left the second wave no slot (caught by the end-to-end
    test of waves; this is its quick twin)."""
    import copy
    from app.state import POD_KIND
    job = indexed_job("waves", pods=4, gpus=8)
    job["spec"]["completions"] = 8
    client = make_client(job)
    state = service(client)
    first = job_pods(job)
    for pod in first:
        schedule(client, pod)
    for pod in first:
        bound = state.find_pod("team-a", pod["metadata"]["name"])
        state.apply(POD_KIND, "MODIFIED", {**bound, "status": {"phase": "Succeeded"}})
    second = []
    for index in range(4, 8):
        pod = copy.deepcopy(first[0])
        pod["metadata"]["name"], pod["metadata"]["uid"] = f"waves-{index}", f"uid-waves-{index}"
        for where in ("labels", "annotations"):
            pod["metadata"][where]["batch.kubernetes.io/job-completion-index"] = str(index)
        state.apply(POD_KIND, "ADDED", pod)
        second.append(pod)
    nodes = [schedule(client, pod) for pod in second]
    assert len({domain_of(client, node, "block") for node in nodes}) == 1
    assert state.plans.get("team-a/pg-waves-uid-waves").counts()["bound"] == 4
