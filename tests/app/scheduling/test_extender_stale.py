"""Stale gangs (KAI's stalegangeviction): a gang left below its minimum with pods bound is evicted whole
after its grace period, so that its replacements are planned again as one gang."""
from __future__ import annotations

import pytest
from service_helpers import Clock, engine, filter_, indexed_job, job_pods, make_client, schedule, service

from grouper.staleness import GRACE_ANNOTATION, grace_period, parse_duration
from app.scheduling.wakeups import WAKE_ANNOTATION
from app.state import POD_KIND
from topology.groups import Group, Slot

GANG = "team-a/pg-llama-uid-llama"


def half_bound(job: dict | None = None, bound: int = 5, elector=None, **settings):
    """An Indexed Job of 8 pods with `bound` of them scheduled and bound, the rest never tried."""
    clock = Clock()
    job = job or indexed_job("llama", pods=8, gpus=4)
    client = make_client(job, clock=clock, elector=elector, **settings)
    state = service(client)
    pods = job_pods(job)
    for pod in pods:
        state.apply(POD_KIND, "ADDED", pod)
    for pod in pods[:bound]:
        schedule(client, pod)
    return clock, client, state, pods


def test_go_durations_as_kai_reads_them():
    assert parse_duration("90s") == 90 and parse_duration("1m30s") == 90 and parse_duration("1.5h") == 5400
    assert parse_duration("-1s") == -1 and parse_duration("0") == 0 and parse_duration("500ms") == 0.5
    for text in ("90", "1x", "", "s", "1m 30s", "--5s", "-"):
        with pytest.raises(ValueError, match="Go duration such as 90s"):
            parse_duration(text)


def test_a_group_is_satisfied_by_its_minimums():
    leaves = [Group(f"sub-{i}", slots=[Slot(f"w{i}", j) for j in range(2)], min_member=1) for i in range(3)]
    root = Group("job", children=leaves, min_subgroup=2, min_member=3)
    assert not root.satisfied_by({Slot("w0", 0), Slot("w1", 0)})                   # two subgroups, two pods
    assert root.satisfied_by({Slot("w0", 0), Slot("w0", 1), Slot("w1", 0)})
    assert not Group("all", slots=[Slot("w", 0), Slot("w", 1)]).satisfied_by({Slot("w", 0)})


def test_a_gang_half_bound_past_its_grace_period_is_evicted_and_its_plan_dropped():
    clock, client, state, pods = half_bound()
    assert engine(client).stale.evict_due() == []                # stale from now on
    assert state.plans.get(GANG).notes[-1] == ("stale: 5 of its 8 pods bound, below the gang's minimum; its "
                                               "bound pods are evicted after 60s unless it recovers")
    clock.now += 59
    assert engine(client).stale.evict_due() == []
    clock.now += 2
    assert engine(client).stale.evict_due() == [GANG]
    assert all(state.find_pod("team-a", pod["metadata"]["name"]) is None for pod in pods[:5])
    assert state.plans.get(GANG) is None and not state.bound.get(GANG)
    event = engine(client).writer.events[-1]
    assert event["reason"] == "StaleGangEvicted" and event["object"] == "team-a/llama"
    assert "5 of its 8 pods bound" in event["message"]
    assert state.metrics.registry.get_sample_value("tas_extender_stale_gang_evictions_total") == 1


def test_a_gang_that_completes_within_its_grace_period_is_left_alone():
    clock, client, state, pods = half_bound()
    engine(client).stale.evict_due()
    clock.now += 30
    for pod in pods[5:]:
        schedule(client, pod)
    clock.now += 60
    assert engine(client).stale.evict_due() == []
    assert len(state.bound[GANG]) == 8


def test_an_elastic_gang_at_its_minimum_is_not_stale():
    job = indexed_job("llama", pods=8, gpus=4)
    job["metadata"]["annotations"]["kai.scheduler/batch-min-member"] = "4"
    clock, client, state, _ = half_bound(job, bound=5)
    engine(client).stale.evict_due()
    clock.now += 3600
    assert engine(client).stale.evict_due() == []


@pytest.mark.parametrize("value, evicted_after", [("10s", 10), ("-1s", None)])
def test_the_workload_annotation_sets_the_grace_period(value, evicted_after):
    job = indexed_job("llama", pods=8, gpus=4)
    job["metadata"]["annotations"][GRACE_ANNOTATION] = value
    clock, client, state, _ = half_bound(job)
    engine(client).stale.evict_due()
    clock.now += 11
    assert engine(client).stale.evict_due() == ([GANG] if evicted_after else [])
    clock.now += 3600
    assert engine(client).stale.evict_due() == []


def test_the_flag_sets_the_default_and_an_invalid_annotation_falls_back_to_it(caplog):
    job = indexed_job("llama", pods=8, gpus=4)
    job["metadata"]["annotations"][GRACE_ANNOTATION] = "ten seconds"
    clock, client, state, _ = half_bound(job, staleness_grace_period=5)
    engine(client).stale.evict_due()
    clock.now += 6
    assert engine(client).stale.evict_due() == [GANG]
    ignored = [r for r in caplog.records if r.getMessage() == "staleness grace period ignored"]
    assert len(ignored) == 1
    assert ignored[0].error.startswith(f"Job team-a/llama annotation {GRACE_ANNOTATION}: 'ten seconds' is not a duration")


def test_nothing_is_evicted_by_a_replica_that_is_not_the_leader():
    follower = type("Follower", (), {"is_leader": staticmethod(lambda: False)})()
    clock, client, state, _ = half_bound(elector=follower)
    engine(client).stale.evict_due()
    clock.now += 3600
    assert engine(client).stale.evict_due() == []


def test_a_kai_podgroup_sets_its_own_grace_period():
    from test_extender_gang_minimum import kai_member, kai_podgroup
    group = kai_podgroup("pg-x", 4)
    group["spec"]["stalenessGracePeriod"] = "20s"
    clock = Clock()
    client = make_client(group, clock=clock)
    state = service(client)
    pods = [kai_member("pg-x", i) for i in range(4)]
    for pod in pods:
        state.apply(POD_KIND, "ADDED", pod)
    for pod in pods[:2]:
        schedule(client, pod)
    engine(client).stale.evict_due()
    clock.now += 15
    assert engine(client).stale.evict_due() == []
    clock.now += 6
    assert engine(client).stale.evict_due() == ["team-a/pg-x"]


def test_a_gang_one_of_whose_pods_succeeded_is_not_stale():
    clock, client, state, pods = half_bound()
    done = state.find_pod("team-a", pods[0]["metadata"]["name"])
    state.apply(POD_KIND, "MODIFIED", {**done, "status": {"phase": "Succeeded"}})
    engine(client).stale.evict_due()
    clock.now += 3600
    assert engine(client).stale.evict_due() == []


def test_controllers_that_create_pods_one_after_another():
    from grouper.minimum import creates_one_after_another
    assert creates_one_after_another({"kind": "StatefulSet", "spec": {}})                     # OrderedReady
    assert not creates_one_after_another({"kind": "StatefulSet", "spec": {"podManagementPolicy": "Parallel"}})
    assert creates_one_after_another({"kind": "LeaderWorkerSet", "spec": {"startupPolicy": "LeaderReady"}})
    assert not creates_one_after_another({"kind": "LeaderWorkerSet", "spec": {}})
    assert creates_one_after_another({"kind": "JobSet", "spec": {"replicatedJobs": [{"dependsOn": [{}]}]}})
    assert creates_one_after_another({"kind": "MPIJob", "spec": {"launcherCreationPolicy": "WaitForWorkersReady"}})
    assert not creates_one_after_another({"kind": "Job", "spec": {}}) and not creates_one_after_another(None)


@pytest.mark.parametrize("policy, stale", [(None, False), ("Parallel", True)])
def test_an_ordered_statefulset_starting_pod_by_pod_is_not_stale(policy, stale):
    """The StatefulSet controller makes pod 1 once pod 0 is Ready: the gang runs below its minimum for as
    long as its pods take to start (image pulls: minutes), which is not staleness."""
    from test_service_kinds import statefulset, statefulset_pods
    workload = statefulset(replicas=4)
    if policy:
        workload["spec"]["podManagementPolicy"] = policy
    clock = Clock()
    client = make_client(workload, clock=clock)
    state = service(client)
    pods = statefulset_pods(workload)
    state.apply(POD_KIND, "ADDED", pods[0])
    schedule(client, pods[0])
    gang = next(iter(state.plans)).key
    engine(client).stale.evict_due()
    clock.now += 3600
    assert engine(client).stale.evict_due() == ([gang] if stale else [])


def test_a_half_bound_gang_whose_plan_for_the_rest_is_refused_is_stale_too():
    """The usual way a gang gets stuck: its other pods' nodes are refused, and planning them again around
    the bound pods finds no room (a refused plan holds no slots)."""
    from app.state.plans import GANG_REFUSED, GangPlan
    clock, client, state, _ = half_bound()
    plan = state.plans.get(GANG)
    state.book.release_plan(plan)
    state.plans.put(GangPlan(plan.key, plan.tree, GANG_REFUSED, owner=plan.owner))
    engine(client).stale.evict_due()
    clock.now += 61
    assert engine(client).stale.evict_due() == [GANG]


def test_the_first_valid_grace_period_wins_and_invalid_ones_are_named():
    podgroup = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                "metadata": {"name": "pg", "namespace": "ns", "annotations": {GRACE_ANNOTATION: "30s"}},
                "spec": {"stalenessGracePeriod": "2m"}}
    assert grace_period(podgroup, []) == (120, [])
    podgroup["spec"]["stalenessGracePeriod"] = 5
    pod = {"metadata": {"name": "p", "namespace": "ns", "annotations": {GRACE_ANNOTATION: "-1s"}}}
    assert grace_period(podgroup, [pod]) == (30, ["PodGroup ns/pg spec.stalenessGracePeriod: 5 is not a duration string"])
    del podgroup["metadata"]["annotations"]
    assert grace_period(podgroup, [pod])[0] == -1
    assert grace_period(None, []) == (None, [])


def test_a_gang_waiting_for_its_preemption_victims_is_not_stale():
    """KAI counts pods waiting for their victims (pipelined) as active: the gang is not stale meanwhile."""
    clock, client, state, _ = half_bound()
    state.plans.get(GANG).preemption = {"status": "waiting"}
    engine(client).stale.evict_due()
    clock.now += 3600
    assert engine(client).stale.evict_due() == []
    state.plans.get(GANG).preemption = {"status": "done"}
    engine(client).stale.evict_due()
    clock.now += 61
    assert engine(client).stale.evict_due() == [GANG]


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_grace_period_that_is_not_a_number_of_seconds_is_refused_naming_the_setting(value):
    """NaN compares false both ways: a gang would have been evicted the moment it turned stale."""
    from pydantic import ValidationError

    from app.settings import Settings
    from app.wire import describe_errors
    with pytest.raises(ValidationError) as refused:
        Settings(staleness_grace_period=value)
    assert describe_errors(refused.value).startswith("staleness_grace_period: Input should be a finite number")


def parked(bound: int = 5, asked: int = 6, **settings):
    """half_bound, and kube-scheduler asked about the pods after the bound ones (up to `asked`) once, before
    the gang turned stale, and never again: as a member parked in its queue."""
    clock, client, state, pods = half_bound(bound=bound, **settings)
    for pod in pods[bound:asked]:
        filter_(client, pod)
    clock.now += 1
    return clock, client, state, pods


def woken(state, pod) -> bool:
    stored = state.find_pod("team-a", pod["metadata"]["name"])
    return WAKE_ANNOTATION in (stored["metadata"].get("annotations") or {})


def test_a_member_kube_scheduler_stopped_asking_about_is_woken_as_its_gang_turns_stale():
    """Before any eviction: the wake annotation (a pod update) requeues a member kube-scheduler parked."""
    clock, client, state, pods = parked()
    assert engine(client).stale.evict_due() == []
    assert woken(state, pods[5])
    assert not any(woken(state, pod) for pod in pods[6:])            # never asked about: not a known member
    assert any("stale: woke team-a/llama-5" in note for note in state.plans.get(GANG).notes)
    assert state.metrics.registry.get_sample_value("tas_extender_wakeups_total") == 1
    clock.now += 61                                                     # woken, and still did not come
    assert engine(client).stale.evict_due() == [GANG]


def test_a_member_that_was_not_woken_holds_the_eviction_until_its_grace_runs_from_its_wake_up(monkeypatch):
    clock, client, state, pods = parked()
    writer = engine(client).writer
    annotate = writer.annotate_pod
    monkeypatch.setattr(writer, "annotate_pod", lambda *args: (_ for _ in ()).throw(RuntimeError("API down")))
    assert engine(client).stale.evict_due() == []
    clock.now += 61
    assert engine(client).stale.evict_due() == []                     # never the first answer to llama-5
    monkeypatch.setattr(writer, "annotate_pod", annotate)
    clock.now += 1
    assert engine(client).stale.evict_due() == [] and woken(state, pods[5])
    clock.now += 59
    assert engine(client).stale.evict_due() == []
    clock.now += 2
    assert engine(client).stale.evict_due() == [GANG]


def test_a_woken_member_that_came_and_was_refused_holds_nothing():
    clock, client, state, pods = parked()
    engine(client).stale.evict_due()
    clock.now += 10
    filter_(client, pods[5])                                            # it came: kube-scheduler asked again
    clock.now += 51
    assert engine(client).stale.evict_due() == [GANG]


def test_a_member_woken_at_once_comes_and_the_gang_completes():
    clock, client, state, pods = parked(asked=8)
    engine(client).stale.evict_due()
    assert all(woken(state, pod) for pod in pods[5:])
    for pod in pods[5:]:
        schedule(client, pod)
    clock.now += 120
    assert engine(client).stale.evict_due() == [] and len(state.bound[GANG]) == 8


def test_a_negative_grace_period_still_wakes_and_never_evicts():
    clock, client, state, pods = parked(staleness_grace_period=-1)
    assert engine(client).stale.evict_due() == [] and woken(state, pods[5])
    clock.now += 3600
    assert engine(client).stale.evict_due() == []
