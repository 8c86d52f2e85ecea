"""The cost of a preemption choice, compared in order (lower is better):

1. the highest priority among the victims: no victim of a higher priority than necessary;
2. whole gangs broken: pods of no gang and spare (elastic) pods of other gangs go first, then whole gangs;
3. the unit resource evicted (GPUs, or cpu on a cluster without them): fewest evicted GPUs;
4. pods evicted;
5. the planner's usual placement rank of the preemptor's plan in that domain.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .candidates import Choice

NO_VICTIM = -(1 << 62)          # the "highest victim priority" of a choice that evicts nobody


@dataclass(frozen=True)
class Cost:
    priority: int               # highest victim priority (NO_VICTIM when nobody is evicted)
    gangs: int                  # gangs evicted whole
    pods: int                   # pods evicted
    rank: tuple = ()            # the plan's rank (filled in once the planner has placed the gang)
    units: int = 0              # the unit resource the victims free (GPUs; cpu millicores without GPUs)

    @property
    def victims(self) -> tuple[int, int, int, int]:
        """The part that only depends on the victims, in the order it is compared."""
        return self.priority, self.gangs, self.units, self.pods

    def _key(self) -> tuple:
        return self.victims + (self.rank,)

    def __lt__(self, other: "Cost") -> bool:
        return self._key() < other._key()

    def __le__(self, other: "Cost") -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: "Cost") -> bool:
        return self._key() > other._key()

    def __ge__(self, other: "Cost") -> bool:
        return self._key() >= other._key()

    def describe(self) -> str:
        if self.pods == 0:
            return "no eviction"
        gangs = f"{self.gangs} gang{'s' if self.gangs != 1 else ''} broken" if self.gangs else "no gang broken"
        return f"{self.pods} pod{'s' if self.pods != 1 else ''} evicted, {gangs}, highest victim priority {self.priority}"


def cost_of(choices: Iterable[Choice], rank: tuple = (), column: int | None = None) -> Cost:
    """`column`: the unit resource's column in the pods' requests (None: units not counted)."""
    chosen = [c for c in choices if not c.empty]
    if not chosen:
        return Cost(NO_VICTIM, 0, 0, rank)
    units = 0 if column is None else sum(int(c.gang.pods[key].request[column]) for c in chosen for key in c.pods)
    # a pod of no gang (a gang of one) breaks nothing: only gangs of several pods count as broken
    return Cost(max(c.gang.priority for c in chosen), sum(1 for c in chosen if c.whole and len(c.gang.pods) > 1),
                sum(len(c.pods) for c in chosen), rank, units)
