"""Wake-ups: requeue a pod our filter refused once the refusal may be over.

kube-scheduler parks a pod rejected by an extender in its unschedulable queue. Any cluster event (a node
or pod added, changed, deleted) moves it back, and without one it waits for the five-minute flush. Some
refusals end without any cluster event: the scheduler-lag grace runs out, a reservation expires, a gang
that waited for its members gets its plan from a sibling whose binding then fails. So for each refused
gang (or plain pod) we keep one refused pod and, when its wait is due, patch an annotation onto it: an
update of an unscheduled pod requeues it. One pod per gang is enough, because its filter call re-plans the
whole gang and its binding is itself an event that moves its siblings.

That last rule has exceptions, read in kube-scheduler's queue (docs/troubleshooting.md, "A gang member parked
in kube-scheduler's queue"): a sibling's binding moves only pods whose refusal names the extender; a member
held at kube-scheduler's own preemption gate, or refused by its own filters alone, stays parked. So the
wake-ups also remember when kube-scheduler last asked about each member of a gang (`heard`): the stale-gang
rule wakes the members it has not heard from before it evicts anything (app/scheduling/stale.py).

Waits grow per gang (5 s, 10 s, ... up to a minute) so that a gang refused for lack of capacity costs at
most one write a minute; a refusal that knows when it ends (the lag grace) is woken just after that.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from grouper.names import WAKE_ANNOTATION  # noqa: F401 - the engine and tests take it from here

FIRST_WAIT, LONGEST_WAIT = 5.0, 60.0
_REMEMBERED_WAITS = 10_000                      # gangs whose last wait is kept, to keep doubling it
_PENDING_LIMIT = 10_000                         # wake-ups waiting (none are taken without a live cluster)
_HEARD_GANGS = 10_000                           # gangs whose members' last calls are kept


@dataclass
class Wake:
    namespace: str
    name: str
    due: float


class Wakeups:
    """Thread-safe. `refused` on each refusal, `bound` when a pod of the gang binds, `take_due` to send."""

    def __init__(self, first: float = FIRST_WAIT, longest: float = LONGEST_WAIT):
        self.first, self.longest = first, longest
        self._pending: dict[str, Wake] = {}
        self._waits: dict[str, float] = {}      # key -> the wait the next wake-up of the key gets
        self._heard: dict[str, dict[str, float]] = {}    # gang -> pod (namespace/name) -> its last call
        self._lock = threading.Lock()

    def refused(self, key: str, namespace: str, name: str, now: float, ends_at: float | None = None) -> None:
        """`key` (a gang, or a plain pod) was refused for pod namespace/name; `ends_at`, when the refusal
        knows it, is when it runs out by itself."""
        with self._lock:
            due = now + self._waits.get(key, self.first) if ends_at is None else ends_at + 0.5
            pending = self._pending.pop(key, None)
            if pending is not None:
                due = min(due, pending.due)
            self._pending[key] = Wake(namespace, name, due)
            while len(self._pending) > _PENDING_LIMIT:
                self._pending.pop(next(iter(self._pending)))

    def bound(self, key: str) -> None:
        """A pod of the gang got a node: its siblings are moved by that event; start over next time."""
        with self._lock:
            self._pending.pop(key, None)
            self._waits.pop(key, None)

    def take_due(self, now: float) -> list[Wake]:
        """The wake-ups due by `now`, removed; each key's next wait doubles."""
        with self._lock:
            due = [key for key, wake in self._pending.items() if wake.due <= now]
            out = []
            for key in due:
                out.append(self._pending.pop(key))
                waited = self._waits.pop(key, self.first)   # re-inserted last: the dict stays in age order
                self._waits[key] = min(self.longest, 2 * waited)
            while len(self._waits) > _REMEMBERED_WAITS:
                self._waits.pop(next(iter(self._waits)))
            return out

    def heard(self, gang: str, pod: str, now: float) -> None:
        """kube-scheduler asked about `pod` (namespace/name) of `gang`: a filter or preempt call."""
        with self._lock:
            members = self._heard.pop(gang, None) or {}    # re-inserted last: the dict stays in age order
            members[pod] = now
            self._heard[gang] = members
            while len(self._heard) > _HEARD_GANGS:
                self._heard.pop(next(iter(self._heard)))

    def last_heard(self, gang: str) -> dict[str, float]:
        """Each member of `gang` kube-scheduler has asked about, and when it last did."""
        with self._lock:
            return dict(self._heard.get(gang) or {})

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)


def wake(writer, namespace: str, name: str, now: float) -> None:
    """Patch the wake annotation onto a pod that waits for a node: an update kube-scheduler's queue acts on
    for a pod the extender refused. Raises what the writer raises."""
    writer.annotate_pod(namespace, name, {WAKE_ANNOTATION: _timestamp(now)})


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def unschedulable_condition(pod: Mapping) -> Mapping | None:
    """The PodScheduled condition kube-scheduler sets when it marked the pod unschedulable (status False,
    reason Unschedulable), else None."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" \
                and condition.get("reason") == "Unschedulable":
            return condition
    return None


def refused_by_kube_scheduler(pod: Mapping) -> str | None:
    """kube-scheduler's own message when it marked the pod unschedulable, else None."""
    condition = unschedulable_condition(pod)
    return None if condition is None else condition.get("message") or "unschedulable"


def waiting(pod: Mapping | None) -> bool:
    """Whether a pod (the service's copy) still waits for a node: it exists, is unbound and not deleting."""
    return pod is not None and not (pod.get("spec") or {}).get("nodeName") \
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
