"""A gang pod tried before its last sibling exists waits for it in the filter call (once per gang, up to
--member-wait) instead of being refused into kube-scheduler's 1-2 s backoff."""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

from app.extender.member_wait import HOLD_PER_GANG, MemberWait
from service_helpers import filter_, make_client, schedule, service
from test_extender_gang_minimum import kai_member, kai_podgroup


def held(client, outcome: str) -> float:
    return service(client).metrics.member_waits.labels(outcome)._value.get()


def test_a_pod_tried_before_its_last_sibling_exists_is_steered_once_the_sibling_appears():
    client = make_client(kai_podgroup("pg-x", 2), member_wait=2.0)
    first, second = kai_member("pg-x", 0), kai_member("pg-x", 1)
    answers = {}
    asking = threading.Thread(target=lambda: answers.setdefault("first", filter_(client, first)))
    asking.start()
    deadline = time.monotonic() + 2
    while service(client).pods_added == 0 and time.monotonic() < deadline:    # the first call is in
        time.sleep(0.005)
    time.sleep(0.05)
    [second_node] = filter_(client, second)["NodeNames"]        # the sibling completes the gang
    asking.join()
    [first_node] = answers["first"]["NodeNames"]
    planned = {slot.node for slot in service(client).plans.get("team-a/pg-x").slots.values()}
    assert planned == {first_node, second_node}
    assert held(client, "whole") == 1 and held(client, "short") == 0
    placed = {schedule(client, pod) for pod in (first, second)}
    assert len(placed) == 2


def test_a_gang_still_short_is_refused_and_its_calls_stop_waiting_once_its_time_is_spent():
    client = make_client(kai_podgroup("pg-x", 4), member_wait=0.02)
    pods = [kai_member("pg-x", i) for i in range(4)]
    for attempt in range(HOLD_PER_GANG + 2):
        answer = filter_(client, pods[attempt % 3])
        assert answer["NodeNames"] == []
        assert "waiting for" in next(iter(answer["FailedAndUnresolvableNodes"].values()))
        if attempt == HOLD_PER_GANG:
            holds = held(client, "short")
    assert 1 <= holds <= HOLD_PER_GANG and held(client, "whole") == 0
    assert held(client, "short") == holds, "the gang's time is spent: later calls are refused at once"
    assert len({schedule(client, pod) for pod in reversed(pods)}) == 4


def test_member_wait_zero_refuses_at_once():
    client = make_client(kai_podgroup("pg-x", 2), member_wait=0)
    assert filter_(client, kai_member("pg-x", 0))["NodeNames"] == []
    assert held(client, "short") == held(client, "whole") == 0


@dataclass
class Waiting:
    awaiting: tuple[str, int] | None


class Ticking:
    """A clock that moves on by `step` each time it is read."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def run_hold(wait: MemberWait, decide, pods: list[int], appear_after: list[int]):
    """wait.filter(decide) while a pod appears after each number of event-loop turns in `appear_after`."""
    async def appear():
        for turns in appear_after:
            for _ in range(turns):
                await asyncio.sleep(0)
            pods[0] += 1

    async def run():
        appearing = asyncio.create_task(appear())
        outcome = await wait.filter(decide)
        appearing.cancel()
        return outcome
    return asyncio.run(run())


def test_a_hold_asks_again_only_when_a_pod_appeared_and_ends_when_the_gang_is_whole():
    pods, asked, ends = [0], [], []

    async def decide():
        asked.append(pods[0])
        return Waiting(("ns/g", 2 - pods[0]) if pods[0] < 2 else None)
    wait = MemberWait(1.0, lambda: pods[0], ends.append, clock=Ticking(0.001), poll=0)
    outcome = run_hold(wait, decide, pods, [5, 5])
    assert outcome.awaiting is None and ends == [True]
    assert asked == [0, 1, 2], "asked at first, then once after each pod that appeared"


def test_a_hold_ends_after_a_quiet_period_and_a_gang_holds_at_most_four_of_them():
    pods, ends = [0], []

    async def decide():
        return Waiting(("ns/g", 5))         # the pods that appear are not the gang's
    clock = Ticking(0.01)
    wait = MemberWait(0.1, lambda: pods[0], ends.append, clock=clock, poll=0)
    run_hold(wait, decide, pods, [1] * 50)
    assert ends == [False] and 0.1 <= wait._held["ns/g"] < 0.15, "a quiet period with no sibling ends it"
    for _ in range(5):
        run_hold(wait, decide, pods, [])
    assert wait._held["ns/g"] < HOLD_PER_GANG * 0.1 + 0.02
    assert len(ends) == HOLD_PER_GANG, "once its time is spent, the gang's calls are answered at once"
