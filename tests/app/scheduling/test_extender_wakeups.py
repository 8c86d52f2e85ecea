"""Wake-ups of refused pods (app/scheduling/wakeups.py): kube-scheduler parks a pod an extender refused until a
cluster event, so the service patches one refused pod per gang when its wait is due. The end-to-end test
(tests/e2e/test_e2e_wakeups.py) shows the stall this prevents on a real kube-scheduler."""
from __future__ import annotations

from app.scheduling.engine import SCHEDULER_LAG_GRACE
from app.scheduling.wakeups import FIRST_WAIT, LONGEST_WAIT, WAKE_ANNOTATION, Wakeups
from app.state import POD_KIND
from service_helpers import Clock, engine, filter_, indexed_job, job_pods, make_client, node_names, schedule, service


def test_one_wake_per_key_with_waits_doubling_up_to_the_longest():
    wakeups = Wakeups()
    wakeups.refused("ns/gang", "ns", "p-0", now=0)
    wakeups.refused("ns/gang", "ns", "p-1", now=1)           # same gang: still one wake, the earlier due time
    assert wakeups.take_due(FIRST_WAIT - 0.1) == []
    (wake,) = wakeups.take_due(FIRST_WAIT)
    assert (wake.name, wake.due) == ("p-1", FIRST_WAIT)
    dues, now = [], 100.0
    for _ in range(6):
        wakeups.refused("ns/gang", "ns", "p-0", now=now)
        (wake,) = wakeups.take_due(now + LONGEST_WAIT)
        dues.append(wake.due - now)
        now += 1000
    assert dues == [2 * FIRST_WAIT, 4 * FIRST_WAIT, 8 * FIRST_WAIT, LONGEST_WAIT, LONGEST_WAIT, LONGEST_WAIT]
    wakeups.bound("ns/gang")                                 # a pod bound: the next wait starts over
    wakeups.refused("ns/gang", "ns", "p-0", now=now)
    assert wakeups.take_due(now + FIRST_WAIT)[0].due == now + FIRST_WAIT


def test_a_refusal_that_knows_its_end_is_woken_just_after_it():
    wakeups = Wakeups()
    wakeups.refused("ns/gang", "ns", "p-0", now=10, ends_at=12)
    assert [w.due for w in wakeups.take_due(13)] == [12.5]


def test_a_refused_gang_pod_is_annotated_when_its_wait_is_due_and_not_before():
    clock = Clock()
    job = indexed_job("huge", pods=4 * len(make_client().app.state.service.cluster.node_names), gpus=8)
    client = make_client(job, clock=clock)
    state = service(client)
    pod = job_pods(job)[0]
    state.apply(POD_KIND, "ADDED", pod)
    assert filter_(client, pod)["NodeNames"] == []
    assert engine(client).wake_refused() == 0
    clock.now += FIRST_WAIT
    assert engine(client).wake_refused() == 1
    assert WAKE_ANNOTATION in state.find_pod("team-a", pod["metadata"]["name"])["metadata"]["annotations"]
    assert engine(client).wake_refused() == 0                   # once per wait


def test_a_pod_no_longer_waiting_is_not_woken():
    clock = Clock()
    job = indexed_job("huge", pods=1000, gpus=8)
    client = make_client(job, clock=clock)
    state = service(client)
    pod = job_pods(job)[0]
    state.apply(POD_KIND, "ADDED", pod)
    filter_(client, pod)
    state.apply(POD_KIND, "DELETED", pod)
    clock.now += FIRST_WAIT
    assert engine(client).wake_refused() == 0


def test_a_pod_refused_while_the_scheduler_lags_is_woken_when_the_grace_ends():
    clock = Clock()
    job = indexed_job("llama", pods=8, gpus=4)
    client = make_client(job, clock=clock)
    state = service(client)
    pods = job_pods(job)
    for pod in pods:
        state.apply(POD_KIND, "ADDED", pod)
    planned = schedule(client, pods[0])
    node = state.plans.get("team-a/pg-llama-uid-llama").slot_of_pod("team-a/llama-0").node
    assert planned == node
    slot_node = next(s.node for s in state.plans.get("team-a/pg-llama-uid-llama").slots.values()
                     if s.slot.index == 1)
    others = [n for n in node_names(client) if n != slot_node]
    assert filter_(client, pods[1], others)["NodeNames"] == []          # its node left out: lag, not re-plan
    clock.now += SCHEDULER_LAG_GRACE
    assert engine(client).wake_refused() == 0
    clock.now += 0.5
    assert engine(client).wake_refused() == 1
    assert filter_(client, pods[1], others)["NodeNames"] != []          # the grace is over: re-planned


def test_wakeups_waiting_are_bounded_oldest_first(monkeypatch):
    import app.scheduling.wakeups as module
    monkeypatch.setattr(module, "_PENDING_LIMIT", 3)
    wakeups = Wakeups()
    for i in range(5):
        wakeups.refused(f"ns/pod-{i}", "ns", f"pod-{i}", now=0)
    wakeups.refused("ns/pod-2", "ns", "pod-2", now=1)        # refused again: now the newest
    assert wakeups.pending() == 3
    assert sorted(w.name for w in wakeups.take_due(100)) == ["pod-2", "pod-3", "pod-4"]
