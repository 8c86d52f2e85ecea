"""A gang pod that reaches kube-scheduler while the rest of its gang is still being created waits for it in
its filter call, briefly, instead of being refused.

Controllers create a gang's pods moments apart (a Job's slow-start batches, a JobSet's jobs, a client's
threads), so an idle kube-scheduler usually tries the first pod before the last one exists. A refused pod
goes back to kube-scheduler's queue with a backoff of at least one second, rounded up to its next whole-second
flush (`podInitialBackoffSeconds` cannot go below 1); on a busy scheduler the gang then starts 1-2 s late.
Held while its siblings keep appearing, the first pod is planned with them and the gang binds at once.

kube-scheduler's scheduling cycle is serial, so every pod behind a held one waits with it. A hold ends as
soon as the answer is no longer "waiting for N more pods", or when no sibling has appeared for `quiet`
seconds, and each gang gets at most `HOLD_PER_GANG` times `quiet` of holding in all, over all of its pods'
calls. A gang still short then is refused as before: a controller that never completes it costs the
scheduler that much once.
"""
from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Protocol

POLL_SECONDS = 0.005         # how often a held call looks for new pods
HOLD_PER_GANG = 4            # a gang's holds add up to at most this many quiet periods
REMEMBERED_GANGS = 4096      # gangs whose time held is kept (the oldest forgotten first)


class Outcome(Protocol):
    awaiting: tuple[str, int] | None         # (gang, pods still missing) while it waits for members


class MemberWait:
    def __init__(self, quiet: float, pods_added: Callable[[], int], on_held: Callable[[bool], None] | None = None,
                 *, clock: Callable[[], float] = time.monotonic, poll: float = POLL_SECONDS):
        """`pods_added()` changes whenever a pod appears in the service's view; `on_held(whole)` is told how
        each hold ended (for the metrics)."""
        self.quiet, self.pods_added, self.on_held = quiet, pods_added, on_held
        self.clock, self.poll = clock, poll
        self._held: OrderedDict[str, float] = OrderedDict()      # gang -> seconds held so far

    async def filter(self, decide: Callable[[], Awaitable[Outcome]]):
        """`decide()`'s outcome, asked again whenever a pod appeared while the gang waits for members."""
        outcome = await decide()
        if outcome.awaiting is None:
            return outcome
        gang, missing = outcome.awaiting
        left = HOLD_PER_GANG * self.quiet - self._held.get(gang, 0.0)
        if left <= 0:
            return outcome
        started = last_sibling = self.clock()
        seen = self.pods_added()
        try:
            while _waits(outcome, gang):
                now = self.clock()
                if now - started >= left or now - last_sibling >= self.quiet:
                    break
                await asyncio.sleep(self.poll)
                if self.pods_added() != seen:
                    seen = self.pods_added()
                    outcome = await decide()
                    if _waits(outcome, gang) and outcome.awaiting[1] < missing:
                        missing, last_sibling = outcome.awaiting[1], self.clock()
        finally:
            self._charge(gang, self.clock() - started)
        if self.on_held is not None:
            self.on_held(not _waits(outcome, gang))
        return outcome

    def _charge(self, gang: str, seconds: float) -> None:
        self._held[gang] = self._held.get(gang, 0.0) + seconds
        self._held.move_to_end(gang)
        while len(self._held) > REMEMBERED_GANGS:
            self._held.popitem(last=False)


def _waits(outcome: Outcome, gang: str) -> bool:
    return outcome.awaiting is not None and outcome.awaiting[0] == gang
