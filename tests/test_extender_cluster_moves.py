"""Issue 13 item 7: plans stay true when the cluster moves under them (pods deleted before the watch saw
them bound, pods of another scheduler landing on reserved nodes)."""
from __future__ import annotations

import copy
from pathlib import Path

import yaml

from app.state import POD_KIND, kind_of
from grouper.kinds import suspended
from service_helpers import domain_of, failures, filter_, indexed_job, job_pods, make_client, schedule, service

GANG = "team-a/pg-llama-uid-llama"


def renamed(pod: dict, name: str) -> dict:
    """The Job controller's replacement of a deleted pod: same index label, a new name and uid."""
    pod = copy.deepcopy(pod)
    pod["metadata"]["name"], pod["metadata"]["uid"] = name, f"uid-{name}"
    return pod


def test_a_filtered_pod_deleted_frees_its_slot_for_the_replacement_at_once():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    state = service(client)
    pods = job_pods(job)
    first = filter_(client, pods[6])["NodeNames"]            # filtered before the watch showed it
    assert len(first) == 1
    state.apply(POD_KIND, "ADDED", pods[6])
    state.apply(POD_KIND, "DELETED", pods[6])                # deleted before it was bound
    slot = next(s for s in state.plans.get(GANG).slots.values() if s.slot.index == 6)
    assert slot.pod is None and slot.reserved               # free for a replacement, still held for the gang
    replacement = renamed(pods[6], "llama-6-x2k4p")
    answer = filter_(client, replacement)
    assert answer["NodeNames"] == first, set(failures(answer).values())


def test_a_deleted_pod_the_watch_never_listed_frees_its_slot():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    state = service(client)
    pods = job_pods(job)
    first = filter_(client, pods[2])["NodeNames"]
    state.apply(POD_KIND, "DELETED", pods[2])                # only the deletion reaches the watch
    assert state.find_pod("team-a", "llama-2") is None
    assert filter_(client, renamed(pods[2], "llama-2-b7qz1"))["NodeNames"] == first
    assert schedule(client, renamed(pods[2], "llama-2-b7qz1")) == first[0]


def other_schedulers_pod(name: str, node: str, gpus: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"nodeName": node, "schedulerName": "default-scheduler", "containers": [
                {"name": "main", "image": "app", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running"}}


def test_a_pod_of_another_scheduler_on_a_reserved_node_moves_the_unbound_slots_inside_the_domain():
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    state = service(client)
    pods = job_pods(job)
    bound = {schedule(client, pod) for pod in pods[:2]}
    plan = state.plans.get(GANG)
    taken = next(s.node for s in plan.slots.values() if s.status == "planned" and s.node not in bound)
    rack = domain_of(client, taken, "rack")
    state.apply(POD_KIND, "ADDED", other_schedulers_pod("intruder", taken, 8))   # bound by the default scheduler
    assert (state.cluster.free >= 0).all()                    # nothing is booked twice
    assert all(s.node != taken for s in plan.slots.values() if s.status == "planned")
    assert all(s.status != "unplaced" for s in plan.slots.values())
    placed = [schedule(client, pod) for pod in pods[2:]]
    assert taken not in placed
    assert plan.status == "bound"
    segments = {}
    for slot in plan.slots.values():
        segments.setdefault(slot.slot.index // 4, set()).add(domain_of(client, slot.node, "rack"))
    assert all(len(racks) == 1 for racks in segments.values())     # each segment of 4 still in one rack
    assert any(rack in racks for racks in segments.values())      # re-planned inside its rack, not moved away


def test_a_deleted_job_gives_back_its_gangs_reservations_at_once():
    """Deleting a workload deletes its pods; a deleted bound pod's slot waits for a replacement, but no
    replacement comes for a deleted Job. Before, its reservations held the nodes until the TTL (five
    minutes), and the next job was refused 'waiting for capacity reserved for gang ...'."""
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job)
    state = service(client)
    pods = job_pods(job)
    for pod in pods[:2]:
        schedule(client, pod)
    assert any(key.startswith(f"gang:{GANG}#") for key in state.cluster.reservations)
    state.apply(kind_of(job), "DELETED", job)
    for pod in pods[:2]:
        state.apply(POD_KIND, "DELETED", pod)
    assert state.plans.get(GANG) is None
    assert not [key for key in state.cluster.reservations if key.startswith(f"gang:{GANG}#")]


def one_pod_bound(job: dict):
    """The service with the job's first pod scheduled (its gang planned and reserved); its state."""
    client = make_client(job)
    schedule(client, job_pods(job)[0])
    return service(client)


def test_a_job_being_deleted_in_the_foreground_gives_back_its_reservations():
    job = indexed_job("llama", pods=8, gpus=4)
    state = one_pod_bound(job)
    deleting = copy.deepcopy(job)
    deleting["metadata"].update(deletionTimestamp="2026-11-25T09:00:00Z")
    state.apply(kind_of(job), "MODIFIED", deleting)
    assert state.plans.get(GANG) is None and not state.cluster.reservations


def test_deleting_another_job_keeps_the_gangs_plan():
    job = indexed_job("llama", pods=8, gpus=4)
    state = one_pod_bound(job)
    other = copy.deepcopy(job)
    other["metadata"]["name"] = "mistral"
    state.apply(kind_of(other), "DELETED", other)
    assert state.plans.get(GANG) is not None


def test_a_job_missing_from_a_relist_gives_back_its_reservations():
    """The watch broke while the Job was deleted: the relist that follows no longer holds it."""
    job = indexed_job("llama", pods=8, gpus=4)
    state = one_pod_bound(job)
    state.replace(kind_of(job), [])
    assert state.plans.get(GANG) is None and not state.cluster.reservations


def test_a_suspended_job_gives_back_its_reservations_and_a_resumed_one_is_planned_afresh():
    """Kueue preempts by suspending: the Job controller deletes the pods and makes no replacements."""
    job = indexed_job("llama", pods=8, gpus=4)
    state = one_pod_bound(job)
    suspended_job = copy.deepcopy(job)
    suspended_job["spec"]["suspend"] = True
    state.apply(kind_of(job), "MODIFIED", suspended_job)
    assert state.plans.get(GANG) is None and not state.cluster.reservations
    state.apply(kind_of(job), "MODIFIED", job)                 # resumed: nothing to drop, nothing kept
    assert state.plans.get(GANG) is None


def test_suspension_is_read_where_each_kind_keeps_it():
    assert suspended({"spec": {"suspend": True}})                                  # Job, JobSet, RayJob
    assert suspended({"spec": {"runPolicy": {"suspend": True}}})                   # kubeflow jobs, MPIJob
    for running in ({"spec": {"suspend": False}}, {"spec": {"runPolicy": {}}}, {"spec": "x"}, {},
                    {"spec": {"suspend": "true", "runPolicy": "x"}}):
        assert not suspended(running), running


def with_generation(job: dict, generation: int, **spec) -> dict:
    job = copy.deepcopy(job)
    job["metadata"]["generation"] = generation
    job["spec"].update(spec)
    return job


def test_a_job_scaled_down_drops_its_plan_and_one_scaled_up_or_only_updated_keeps_it():
    """An elastic Indexed Job scaled from 8 to 4 pods: the controller deletes indexes 4-7 and makes no
    replacements, so their reservations must not wait for the TTL."""
    job = with_generation(indexed_job("llama", pods=8, gpus=4), 1)
    state = one_pod_bound(job)
    state.apply(kind_of(job), "MODIFIED", with_generation(job, 1, parallelism=4, completions=4))
    assert state.plans.get(GANG) is not None           # same generation: a status update, not a new spec
    state.apply(kind_of(job), "MODIFIED", with_generation(job, 2, parallelism=16, completions=16))
    assert state.plans.get(GANG) is not None           # every planned pod is still declared
    state.apply(kind_of(job), "MODIFIED", with_generation(job, 3, parallelism=4, completions=4))
    assert state.plans.get(GANG) is None and not state.cluster.reservations


GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"


def test_a_leaderworkerset_scaled_down_drops_the_plans_of_its_removed_groups_only():
    """Each LeaderWorkerSet group is its own gang; with fewer replicas the LWS controller deletes the last
    groups, whose plans go, while the plans of the groups it keeps stay."""
    lws = yaml.safe_load((Path(__file__).parent / "fixtures" / "workloads" / "lws-segments.yaml").read_text())
    lws["metadata"].update(generation=1, annotations={"kai.scheduler/topology": "default",
                                                      "kai.scheduler/topology-required-placement": "rack"})
    template = lws["spec"]["leaderWorkerTemplate"]
    template["size"] = 3
    del template["subGroupPolicy"]
    client = make_client(lws)
    pods = job_pods(lws)
    for group in (0, 1):
        schedule(client, next(p for p in pods if p["metadata"]["labels"][GROUP_INDEX] == str(group)))
    state = service(client)
    assert len(state.plans) == 2
    smaller = with_generation(lws, 2, replicas=1)
    state.apply(kind_of(lws), "MODIFIED", smaller)
    kept = [plan.key for plan in state.plans]
    assert len(kept) == 1 and all(state.plans.get(key).slots for key in kept)
    assert {key for key in state.cluster.reservations if key.startswith("gang:")} and \
        all(key.startswith(f"gang:{kept[0]}#") for key in state.cluster.reservations if key.startswith("gang:"))
