"""A gang pod tried before its last sibling exists waits for it in the filter call (once per gang, up to
--member-wait) instead of being refused into kube-scheduler's 1-2 s backoff."""
from __future__ import annotations

import asyncio
import math
import threading
import time
from dataclasses import dataclass

from app.scheduling.member_wait import HOLD_PER_GANG, MAX_HOLD, SHARE, MemberWait
from service_helpers import engine, filter_, make_client, schedule, service
from test_extender_gang_minimum import kai_member, kai_podgroup


def held(client, outcome: str) -> float:
    return service(client).metrics.member_waits.labels(outcome)._value.get()


def test_a_pod_tried_before_its_last_sibling_exists_is_steered_once_the_sibling_appears():
    client = make_client(kai_podgroup("pg-x", 2), member_wait=1.0)
    engine(client).member_wait.max_hold = math.inf      # the mechanism; the service caps holds at MAX_HOLD
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


def ticking(client, step: float = 0.001, **settings) -> Ticking:
    """Give the service's member wait a clock that moves on by `step` per read, so how long a call is held
    is counted in clock reads, not in wall time a loaded machine stretches."""
    wait, clock = engine(client).member_wait, Ticking(step)
    engine(client).member_wait = MemberWait(wait.quiet, wait.pods_added, wait.on_held, clock=clock,
                                            on_seconds=wait.on_seconds, **settings)
    return clock


def test_no_call_is_held_longer_than_max_hold():
    client = make_client(kai_podgroup("pg-x", 2), member_wait=1.0)
    clock = ticking(client)
    assert filter_(client, kai_member("pg-x", 0))["NodeNames"] == []
    histogram = service(client).metrics.member_wait_seconds
    assert MAX_HOLD <= histogram._sum.get() <= MAX_HOLD + 2 * clock.step and held(client, "short") == 1


def test_a_gang_kept_short_waits_only_while_its_pods_come_then_is_refused_at_once():
    client = make_client(kai_podgroup("pg-x", 4), member_wait=0.02)
    ticking(client, max_hold=math.inf)
    pods = [kai_member("pg-x", i) for i in range(4)]
    for pod in [*pods[:3], *pods[:3]]:
        answer = filter_(client, pod)
        assert answer["NodeNames"] == []
        assert "waiting for" in next(iter(answer["FailedAndUnresolvableNodes"].values()))
    assert held(client, "short") == 3, "each call that brought a new pod waited; the retries did not"
    assert held(client, "whole") == 0
    assert len({schedule(client, pod) for pod in reversed(pods)}) == 4


def test_member_wait_zero_refuses_at_once():
    client = make_client(kai_podgroup("pg-x", 2), member_wait=0)
    assert filter_(client, kai_member("pg-x", 0))["NodeNames"] == []
    assert held(client, "short") == held(client, "whole") == 0


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
    wait = MemberWait(1.0, lambda: pods[0], ends.append, clock=Ticking(0.001), poll=0, max_hold=math.inf)
    outcome = run_hold(wait, decide, pods, [5, 5])
    assert outcome.awaiting is None and ends == [True]
    assert asked == [0, 1, 2], "asked at first, then once after each pod that appeared"


def test_a_stuck_gang_is_held_one_quiet_period_and_never_again():
    pods, ends = [0], []

    async def decide():
        return Waiting(("ns/g", 5))         # the pods that appear are not the gang's
    wait = MemberWait(0.1, lambda: pods[0], ends.append, clock=Ticking(0.01), poll=0, max_hold=math.inf)
    run_hold(wait, decide, pods, [1] * 50)
    assert ends == [False] and 0.1 <= wait._gangs["ns/g"].held < 0.15
    for _ in range(5):
        run_hold(wait, decide, pods, [1] * 50)
    assert ends == [False], "no pod of the gang came since: its retries are answered at once"


def test_a_slowly_growing_gang_is_held_at_most_four_quiet_periods():
    pods, ends = [0], []

    async def decide():
        return Waiting(("ns/g", 1000 - pods[0]))       # a pod of the gang comes every few looks
    wait = MemberWait(0.1, lambda: pods[0], ends.append, clock=Ticking(0.01), poll=0, max_hold=math.inf)
    for _ in range(3):
        run_hold(wait, decide, pods, [5] * 200)
    assert HOLD_PER_GANG * 0.1 - 0.05 <= wait._gangs["ns/g"].held < HOLD_PER_GANG * 0.1 + 0.05
    assert ends == [False], "one hold, ended by the gang's time; later calls are answered at once"


def test_holds_of_many_gangs_take_at_most_a_share_of_the_time():
    pods, clock = [0], Ticking(0.01)
    wait = MemberWait(0.1, lambda: pods[0], clock=clock, poll=0, max_hold=math.inf)
    for n in range(100):                           # a hundred new gangs, none of which ever completes
        async def decide(name=f"ns/g{n}"):
            return Waiting((name, 3))
        run_hold(wait, decide, pods, [1] * 50)
        clock.now += 0.2                           # kube-scheduler busy with other pods meanwhile
    held = sum(gang.held for gang in wait._gangs.values())
    assert held <= HOLD_PER_GANG * 0.1 + SHARE * clock.now + 0.05
    assert held < 0.5 * 100 * 0.1, "unbounded, each gang would have held a whole quiet period"


def test_a_gang_that_lost_a_pod_is_held_again_when_its_replacement_comes():
    pods, ends = [0], []
    missing = [1]

    async def decide():
        return Waiting(("ns/g", missing[0]))
    clock = Ticking(0.01)
    wait = MemberWait(0.1, lambda: pods[0], ends.append, clock=clock, poll=0, max_hold=math.inf)
    run_hold(wait, decide, pods, [])                 # first seen: held one quiet period
    clock.now += 10
    missing[0] = 2                                   # a pod was deleted
    run_hold(wait, decide, pods, [])
    missing[0] = 1                                   # its replacement appeared
    run_hold(wait, decide, pods, [])
    assert len(ends) == 2, "held when first seen and when the replacement came, not in between"
