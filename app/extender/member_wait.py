"""A gang pod that reaches kube-scheduler while the rest of its gang is still being created waits for it in
its filter call, briefly, instead of being refused.

Controllers create a gang's pods moments apart (a Job's slow-start batches, a JobSet's jobs, a client's
threads), so an idle kube-scheduler usually tries the first pod before the last one exists. A refused pod
goes back to kube-scheduler's queue with a backoff of at least one second, rounded up to its next whole-second
flush (`podInitialBackoffSeconds` cannot go below 1); on a busy scheduler the gang then starts 1-2 s late.
Held while its siblings keep appearing, the first pod is planned with them and the gang binds at once.

kube-scheduler's scheduling cycle is serial: every pod behind a held one waits with it. So a call is held
only while the gang's pods keep coming (one appeared less than `quiet` seconds ago: the pod at hand, when it
is the gang's newest), a gang gets at most `HOLD_PER_GANG` quiet periods of holding in all, and all holds
together take at most `SHARE` of the time (after a burst of `HOLD_PER_GANG` quiet periods). A gang still
short is refused as before: a controller that never completes it costs the scheduler one quiet period.
"""
from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

POLL_SECONDS = 0.001         # how often a held call looks for new pods
# No call is held longer than this: kube-scheduler's loop is serial, every pod behind a held one waits with it
# (measured before this cap: 9-17 held calls per round of 24 gangs, up to 0.9 s of the loop). Where the API
# server serves PodGroups, gangs wait at kube-scheduler's own gate instead (app.kube.native_gate) and
# nothing is held.
MAX_HOLD = 0.005
HOLD_PER_GANG = 4            # a gang's holds add up to at most this many quiet periods
SHARE = 0.1                  # holds take at most this share of the time, past a burst of HOLD_PER_GANG periods
REMEMBERED_GANGS = 4096      # gangs tracked (the oldest forgotten first)


class Outcome(Protocol):
    awaiting: tuple[str, int] | None         # (gang, pods still missing) while it waits for members


@dataclass
class _Gang:
    missing: int             # pods missing when last seen
    grown: float             # when a pod of it last appeared (or it was first seen)
    held: float = 0.0        # seconds its calls were held


class MemberWait:
    def __init__(self, quiet: float, pods_added: Callable[[], int], on_held: Callable[[bool], None] | None = None,
                 *, clock: Callable[[], float] = time.monotonic, poll: float = POLL_SECONDS,
                 on_seconds: Callable[[float], None] | None = None, max_hold: float = MAX_HOLD):
        """`pods_added()` changes whenever a pod appears in the service's view; `on_held(whole)` is told how
        each hold ended (for the metrics)."""
        self.quiet, self.pods_added, self.on_held = quiet, pods_added, on_held
        self.clock, self.poll = clock, poll
        self.on_seconds = on_seconds
        self.max_hold = max_hold
        self._gangs: OrderedDict[str, _Gang] = OrderedDict()
        self._allowance, self._counted = self._burst, clock()     # seconds of holding available, and when

    @property
    def _burst(self) -> float:
        return HOLD_PER_GANG * self.quiet

    async def filter(self, decide: Callable[[], Awaitable[Outcome]]):
        """`decide()`'s outcome, asked again whenever a pod appeared while the gang waits for members."""
        outcome = await decide()
        if outcome.awaiting is None or self.quiet <= 0:
            return outcome
        gang = self._seen(*outcome.awaiting)
        started = self.clock()
        if not self._may_hold(gang, started, started):
            return outcome
        name, seen = outcome.awaiting[0], self.pods_added()
        deciding = 0.0          # the asks again (planning the gang once whole) are work, not waiting
        try:
            while _waits(outcome, name) and self._within(gang, started + deciding):
                await asyncio.sleep(self.poll)
                if self.pods_added() != seen:
                    seen = self.pods_added()
                    asked = time.perf_counter()
                    outcome = await decide()
                    deciding += time.perf_counter() - asked
                    if _waits(outcome, name):
                        self._seen(*outcome.awaiting)
        finally:
            held = max(0.0, self.clock() - started - deciding)
            gang.held += held
            self._allowance -= held
            if self.on_seconds is not None:
                self.on_seconds(held)
        if self.on_held is not None:
            self.on_held(not _waits(outcome, name))
        return outcome

    def _within(self, gang: _Gang, started: float) -> bool:
        now = self.clock()
        return now - started < self.max_hold and self._may_hold(gang, started, now)

    def _seen(self, name: str, missing: int) -> _Gang:
        """The gang's record, its growth noted when fewer pods are missing than last time (or it is new)."""
        now = self.clock()
        gang = self._gangs.get(name)
        if gang is None:
            gang = self._gangs[name] = _Gang(missing, now)
        elif missing < gang.missing:
            gang.grown = now
        gang.missing = missing                  # also up: a pod deleted, to be replaced
        self._gangs.move_to_end(name)
        while len(self._gangs) > REMEMBERED_GANGS:
            self._gangs.popitem(last=False)
        return gang

    def _may_hold(self, gang: _Gang, started: float, now: float) -> bool:
        """Its pods still coming, its own time and the shared allowance not spent (counting this hold)."""
        self._allowance = min(self._burst, self._allowance + SHARE * (now - self._counted))
        self._counted = now
        holding = now - started
        return (now - gang.grown < self.quiet and gang.held + holding < self._burst
                and self._allowance - holding > 0)


def _waits(outcome: Outcome, gang: str) -> bool:
    return outcome.awaiting is not None and outcome.awaiting[0] == gang
