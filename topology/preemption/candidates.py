"""Who may be evicted, and the ways to evict inside one domain.

Other gangs come in as RunningGang values: their priority, their running pods (node and request) and
how many pods they can spare. A gang loses either some of its spare (elastic) pods, which breaks
nothing, or all of its pods: taking part of a gang below its minimum would leave it broken anyway, so
that is never offered. A pod outside any gang is a gang of one with nothing to spare.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)
class RunningPod:
    node: int                       # node index (the plan input's node order)
    request: np.ndarray             # row in the plan input's resource index


@dataclass(eq=False)
class RunningGang:
    """A running workload that may lose pods. `min_member`: pods it needs to keep running (None: all of
    them); `elastic`: the pods that may go alone (None: any of them, as long as min_member stay)."""

    key: str
    priority: int
    pods: Mapping[str, RunningPod]
    min_member: int | None = None
    elastic: frozenset[str] | None = None

    def eligible(self) -> list[str]:
        """Pods that may be evicted without breaking the gang (at most `spare()` of them at once)."""
        keys = sorted(self.pods) if self.elastic is None else sorted(k for k in self.elastic if k in self.pods)
        return keys if self.spare() else []

    def spare(self) -> int:
        total = len(self.pods)
        keep = total if self.min_member is None else min(max(self.min_member, 0), total)
        limit = total - keep
        if self.elastic is not None:
            limit = min(limit if self.min_member is not None else total, sum(k in self.pods for k in self.elastic))
        return max(limit, 0)


@dataclass(frozen=True)
class Victim:
    pod: str
    gang: str
    priority: int
    node: int
    whole: bool                     # its gang is evicted whole (broken); else one of its spare pods


def candidate_gangs(running: Iterable[RunningGang], priority: int, *, own: str | None = None,
                    protected: Iterable[str] = ()) -> list[RunningGang]:
    """Gangs whose pods may be victims of a preemptor of `priority`: strictly lower priority, not the
    preemptor's own gang, not protected (e.g. an eviction of theirs was refused), with running pods."""
    protected = set(protected)
    return [gang for gang in running
            if gang.priority < priority and gang.key != own and gang.key not in protected and gang.pods]


@dataclass(frozen=True, eq=False)
class Choice:
    """What one gang loses: nothing, some spare pods, or everything (`whole`)."""

    gang: RunningGang
    pods: tuple[str, ...] = ()
    whole: bool = False

    @property
    def empty(self) -> bool:
        return not self.pods


@dataclass(eq=False)
class GangInDomain:
    """A candidate gang seen from one domain: its pods inside, and the spare ones inside."""

    gang: RunningGang
    inside: tuple[str, ...]
    spare_inside: tuple[str, ...]
    spare: int
    _groups: list[tuple[str, ...]] = field(default_factory=list)

    @classmethod
    def of(cls, gang: RunningGang, in_domain: np.ndarray) -> "GangInDomain | None":
        inside = tuple(k for k in sorted(gang.pods) if in_domain[gang.pods[k].node])
        if not inside:
            return None
        eligible = set(gang.eligible())
        spare_inside = tuple(k for k in inside if k in eligible)
        spare = min(gang.spare(), len(spare_inside))
        # spare pods on the same node with the same request are interchangeable: choose counts, not sets
        groups: dict[tuple, list[str]] = {}
        for key in spare_inside:
            pod = gang.pods[key]
            groups.setdefault((pod.node, pod.request.tobytes()), []).append(key)
        return cls(gang, inside, spare_inside, spare, [tuple(v) for _, v in sorted(groups.items(), key=lambda kv: kv[0][0])])

    def whole(self) -> Choice:
        return Choice(self.gang, tuple(sorted(self.gang.pods)), True)

    def most_spare(self) -> Choice:
        """As many spare pods inside as the gang can lose, whole nodes first."""
        ordered = [key for group in sorted(self._groups, key=lambda g: -len(g)) for key in group]
        return Choice(self.gang, tuple(sorted(ordered[:self.spare])))

    def options(self, limit: int) -> list[Choice] | None:
        """Every way to evict from this gang (nothing first, whole last); None when more than `limit`."""
        found = [Choice(self.gang)]
        if self.spare and math.prod(len(g) + 1 for g in self._groups) > 64 * limit:
            return None
        if self.spare:
            for counts in _bounded_vectors([len(g) for g in self._groups], self.spare):
                if len(found) >= limit:
                    return None
                pods = tuple(sorted(key for group, n in zip(self._groups, counts) for key in group[:n]))
                found.append(Choice(self.gang, pods))
        partial_is_all = self.spare >= len(self.gang.pods)
        if not partial_is_all:
            found.append(self.whole())
        return found if len(found) <= limit else None


def _bounded_vectors(sizes: Sequence[int], total: int) -> Iterator[tuple[int, ...]]:
    """Vectors v with 0 <= v[i] <= sizes[i] and 1 <= sum(v) <= total."""
    for counts in itertools.product(*(range(size + 1) for size in sizes)):
        if 1 <= sum(counts) <= total:
            yield counts


def gangs_in_domain(gangs: Iterable[RunningGang], in_domain: np.ndarray) -> list[GangInDomain]:
    found = (GangInDomain.of(gang, in_domain) for gang in gangs)
    return [g for g in found if g is not None]


def victims_of(choices: Iterable[Choice]) -> list[Victim]:
    victims = []
    for choice in choices:
        gang = choice.gang
        for key in choice.pods:
            victims.append(Victim(key, gang.key, gang.priority, gang.pods[key].node, choice.whole))
    return sorted(victims, key=lambda v: (v.gang, v.pod))


def freed(free: np.ndarray, choices: Iterable[Choice]) -> np.ndarray:
    """The free matrix once the chosen pods are gone."""
    result = np.array(free, dtype=np.int64, copy=True)
    for choice in choices:
        for key in choice.pods:
            pod = choice.gang.pods[key]
            result[pod.node] += pod.request
    return result
