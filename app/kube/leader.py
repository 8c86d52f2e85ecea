"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's rules.

Every `retry_period` each candidate reads the Lease. The holder renews it (renewTime); a candidate takes it
when it is free (no holderIdentity) or when its record has not changed for leaseDurationSeconds as measured
on the candidate's own clock (no trust in other machines' clocks). Writes carry the resourceVersion read,
so two candidates racing for one Lease cannot both win (409 Conflict for the loser).
A leader that has not renewed for `renew_deadline` (< lease_duration) stops calling itself leader before
anyone else may take over. `stop()` releases the Lease so a standby takes over at its next retry.
`hand_over()` releases it too, but the replica keeps `serving()` until another one holds the Lease: a leader
being replaced answers until its successor can (app/listeners.py stops it then).
"""
from __future__ import annotations

import logging
import math
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone

from .client import KubeApi, KubeApiError

log = logging.getLogger(__name__)

Callback = Callable[[], None]


def _micro_time() -> str:
    """metav1.MicroTime: RFC 3339 with microseconds."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


CANDIDATE_JITTER = 1.2        # a candidate retries every retry_period x U(1, 1.2), so candidates do not align


def takeover_bounds(lease_duration: float = 15.0, retry_period: float = 2.0) -> tuple[float, float]:
    """Seconds from a leader's crash to a standby taking the Lease, API round trips aside. The leader last
    renewed at most one retry_period before the crash; the standby sees that renewal within one of its own
    retries after it, waits lease_duration from then on its own clock, and notices expiry within one more."""
    standby_retry = retry_period * CANDIDATE_JITTER
    return lease_duration - retry_period, lease_duration + 2 * standby_retry


class LeaderElector:
    """Runs an election loop in a background thread; `is_leader()` is what /readyz reads."""

    def __init__(self, api: KubeApi, namespace: str, name: str, identity: str | None = None, *,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0,
                 on_started_leading: Callback | None = None, on_stopped_leading: Callback | None = None):
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError("leader election needs 0 < retry_period < renew_deadline < lease_duration, got "
                             f"retry_period={retry_period}, renew_deadline={renew_deadline}, "
                             f"lease_duration={lease_duration}")
        self.api, self.namespace, self.name = api, namespace, name
        self.collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.path = f"{self.collection}/{name}"
        self.identity = identity or default_identity()
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self.on_started_leading, self.on_stopped_leading = on_started_leading, on_stopped_leading
        self.attempts = 0
        self._lease: dict | None = None            # the last Lease object read or written
        self._observed_spec: dict | None = None
        self._observed_at = 0.0                    # monotonic time the observed spec last changed
        self._renewed_at = -math.inf               # monotonic time of our last successful acquire/renew
        self._leading = False
        self._handing_over = False                 # hand_over() released the Lease: serving until the exit
        self._release_on_stop = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- public
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("LeaderElector already started")
        self._thread = threading.Thread(target=self._run, name=f"leader-election {self.identity}", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True, timeout: float = 5.0) -> None:
        """End the loop; with `release` the Lease is handed back so a standby takes over at once."""
        self._release_on_stop = release
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def is_leader(self) -> bool:
        return self._leading and time.monotonic() - self._renewed_at < self.renew_deadline

    def serving(self) -> bool:
        """Whether this replica answers as the leader (what /readyz reads): it leads, or it handed the Lease
        over and is being stopped. A replica being stopped stays a fallback until it exits: its successor is
        Ready as soon as it holds the Lease, but the Service needs a probe period to route to it."""
        return self._handing_over or self.is_leader()

    def hand_over(self, timeout: float, interval: float = 0.2) -> str | None:
        """Release the Lease and wait, up to `timeout` seconds, for another replica to hold it, serving
        meanwhile. Returns that replica's identity, or None (this replica did not lead, or nobody took over).
        The election loop ends: a replica being stopped never leads again, and is_leader() is false at once
        (the leader's background work stops; the verbs and the webhook still answer)."""
        leading = self.is_leader()
        self._handing_over = leading
        self.stop(release=True)
        if not leading:
            return None
        log.info("leader election: %s handed lease %s over; serving until another replica holds it (at most "
                 "%gs)", self.identity, self.path, timeout)
        deadline = time.monotonic() + timeout
        while True:
            successor = self._holder()
            if successor and successor != self.identity:
                log.info("leader election: %s holds lease %s now", successor, self.path)
                return successor
            if time.monotonic() >= deadline:
                log.warning("leader election: nobody took lease %s over within %gs", self.path, timeout)
                return None
            time.sleep(interval)

    @property
    def leader(self) -> str | None:
        """The holder seen in the Lease ("" or None: nobody)."""
        return (self._observed_spec or {}).get("holderIdentity") or None

    # ---- loop
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                renewed = self._try_acquire_or_renew()
            except Exception:  # noqa: BLE001 - a dead loop would leave this replica unready for good
                log.exception("leader election: round failed for lease %s", self.path)
                renewed = False
            self._update_leadership(renewed)
            delay = self.retry_period if self._leading else self.retry_period * random.uniform(1.0, CANDIDATE_JITTER)
            self._stop.wait(delay)
        if self._release_on_stop and self._leading:
            self._release()
        self._set_leading(False)

    def _try_acquire_or_renew(self) -> bool:
        self.attempts += 1
        now = time.monotonic()
        try:
            lease = self.api.request("GET", self.path)
        except KubeApiError as error:
            if error.status == 404:
                return self._create()
            log.warning("leader election: cannot read lease %s: %s", self.path, error)
            return False
        spec = lease.get("spec") or {}
        if spec != self._observed_spec:
            self._observed_spec, self._observed_at = spec, now
        self._lease = lease
        holder = spec.get("holderIdentity") or ""
        duration = spec.get("leaseDurationSeconds") or self.lease_duration
        if holder and holder != self.identity and now < self._observed_at + duration:
            return False
        ours = holder == self.identity
        renewed = {**spec, **self._record(),
                   "acquireTime": spec.get("acquireTime") if ours else _micro_time(),
                   "leaseTransitions": (spec.get("leaseTransitions") or 0) + (0 if ours else 1)}
        if not ours:
            log.info("leader election: %s takes over lease %s from %r", self.identity, self.path, holder or None)
        return self._write("PUT", {**lease, "spec": renewed})

    def _create(self) -> bool:
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": self.name, "namespace": self.namespace},
                 "spec": {**self._record(), "acquireTime": _micro_time(), "leaseTransitions": 0}}
        return self._write("POST", lease, self.collection)

    def _record(self) -> dict:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
                "renewTime": _micro_time()}

    def _write(self, method: str, lease: dict, path: str | None = None) -> bool:
        try:
            written = self.api.request(method, path or self.path, body=lease)
        except KubeApiError as error:
            if error.status != 409:                  # 409: another candidate wrote first
                log.warning("leader election: cannot write lease %s: %s", self.path, error)
            return False
        self._lease = written
        self._observed_spec, self._observed_at = written.get("spec") or {}, time.monotonic()
        return True

    def _update_leadership(self, renewed: bool) -> None:
        now = time.monotonic()
        if renewed:
            self._renewed_at = now
            self._set_leading(True)
        elif self._leading and (self.leader != self.identity or now - self._renewed_at >= self.renew_deadline):
            log.warning("leader election: %s lost lease %s", self.identity, self.path)
            self._set_leading(False)

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        if leading:
            log.info("leader election: %s is now the leader (%s)", self.identity, self.path)
        callback = self.on_started_leading if leading else self.on_stopped_leading
        if callback is not None:
            try:
                callback()
            except Exception:  # noqa: BLE001 - a callback must not end the election loop
                log.exception("leader election callback failed")

    def _holder(self) -> str | None:
        try:
            lease = self.api.request("GET", self.path)
        except KubeApiError as error:
            log.warning("leader election: cannot read lease %s: %s", self.path, error)
            return None
        return (lease.get("spec") or {}).get("holderIdentity") or None

    def _release(self) -> None:
        """Hand the Lease back: no holder, 1 s duration, transitions kept (as client-go's ReleaseOnCancel)."""
        if self._lease is None or (self._lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        spec = {**self._lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1,
                "acquireTime": _micro_time(), "renewTime": _micro_time()}
        try:
            self.api.request("PUT", self.path, body={**self._lease, "spec": spec})
            log.info("leader election: %s released lease %s", self.identity, self.path)
        except KubeApiError as error:
            log.warning("leader election: could not release lease %s: %s", self.path, error)
