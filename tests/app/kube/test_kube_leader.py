"""LeaderElector against the fake API server: the Lease fields it writes, and the faults the real API
server cannot produce on demand (conflicting writes, failing renewals). Takeover after expiry or release
and racing candidates run against the real API server in tests/e2e/test_e2e_kube_adapters.py."""
from __future__ import annotations

import paths
import threading

import pytest
from fakekube import fake_kube, wait_until  # noqa: F401 - fake_kube is a fixture

from app.kube.client import KubeApi, build_api_client
from app.kube.leader import LeaderElector

NAMESPACE, LEASE = "tas-system", "tas-extender"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"
# Short enough for takeovers within a test, long enough that a leader on a loaded 2-core machine (this
# process also runs the fake API server) does not miss its renew deadline and step down by accident.
FAST = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.1}
TAKEOVER = 30.0             # seconds to wait for a lease to expire and change hands


class Calls:
    def __init__(self) -> None:
        self.started = 0
        self.stopped = 0

    def on_started(self) -> None:
        self.started += 1

    def on_stopped(self) -> None:
        self.stopped += 1


@pytest.fixture
def elector(fake_kube):
    electors: list[LeaderElector] = []

    def make(identity: str, calls: Calls | None = None, **timing) -> LeaderElector:
        calls = calls or Calls()
        elector = LeaderElector(KubeApi(build_api_client(host=fake_kube.url)), NAMESPACE, LEASE, identity,
                                on_started_leading=calls.on_started, on_stopped_leading=calls.on_stopped,
                                **{**FAST, **timing})
        electors.append(elector)
        return elector

    yield make
    for each in electors:
        each.stop(release=False)


def lease(fake) -> dict:
    return fake.get("coordination.k8s.io/v1", "Lease", LEASE, NAMESPACE)


def test_a_lone_candidate_creates_the_lease_and_leads(fake_kube, elector):
    calls = Calls()
    a = elector("a", calls)
    a.start()
    wait_until(a.is_leader, what="a leads")
    spec = lease(fake_kube)["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseTransitions"] == 0 and spec["leaseDurationSeconds"] == 3
    assert spec["renewTime"].endswith("Z") and "." in spec["renewTime"]      # MicroTime
    first_renew = spec["renewTime"]
    wait_until(lambda: lease(fake_kube)["spec"]["renewTime"] != first_renew, what="a renews")
    assert lease(fake_kube)["spec"]["acquireTime"] == spec["acquireTime"]
    assert calls.started == 1 and calls.stopped == 0


def test_a_lease_renewed_by_someone_else_is_never_taken(fake_kube, elector):
    fake_kube.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                      "metadata": {"name": LEASE, "namespace": NAMESPACE},
                      "spec": {"holderIdentity": "other", "leaseDurationSeconds": 3, "leaseTransitions": 4,
                               "renewTime": "2026-01-01T00:00:00.000000Z"}})
    stop_renewing = threading.Event()

    def other_renews() -> None:
        beat = 0
        while not stop_renewing.wait(0.1):
            beat += 1
            fake_kube.update("coordination.k8s.io/v1", "Lease", LEASE,
                             {"spec": {"renewTime": f"2026-01-01T00:00:{beat % 60:02d}.{beat:06d}Z"}}, NAMESPACE)

    renewer = threading.Thread(target=other_renews)
    renewer.start()
    try:
        a = elector("a")
        a.start()
        wait_until(lambda: a.attempts >= 12, what="a tries while other renews")
        assert not a.is_leader() and a.leader == "other"
    finally:
        stop_renewing.set()
        renewer.join()
    wait_until(a.is_leader, timeout=TAKEOVER, what="a takes over once other stops")
    assert lease(fake_kube)["spec"]["leaseTransitions"] == 5


def test_a_conflicting_write_loses_the_round_only(fake_kube, elector):
    fake_kube.fail("POST", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases", times=2, code=409)
    a = elector("a")
    a.start()
    wait_until(a.is_leader, what="a leads after two lost rounds")
    assert a.attempts >= 3


def test_a_leader_that_cannot_renew_steps_down_then_recovers(fake_kube, elector):
    calls = Calls()
    a = elector("a", calls)
    a.start()
    wait_until(a.is_leader, what="a leads")
    fake_kube.fail("PUT", LEASE_PATH, times=30, code=500)       # >= 3 s of failed renewals > renew_deadline
    wait_until(lambda: calls.stopped == 1, timeout=TAKEOVER, what="a steps down")
    assert not a.is_leader()
    wait_until(a.is_leader, timeout=TAKEOVER, what="a leads again once the API answers")
    wait_until(lambda: calls.started == 2, what="the started callback (it runs just after leading is set)")


def test_inconsistent_timings_are_refused(fake_kube):
    api = KubeApi(build_api_client(host=fake_kube.url))
    with pytest.raises(ValueError, match="renew_deadline < lease_duration"):
        LeaderElector(api, NAMESPACE, LEASE, "a", lease_duration=5, renew_deadline=10, retry_period=2)


class _FlakyApi:
    """Raises an unexpected error on the first call, then stands in for an empty API server."""

    def __init__(self) -> None:
        self.calls = 0
        self.lease: dict | None = None

    def request(self, method: str, path: str, *, body=None, **_):
        from app.kube.client import KubeApiError
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("something no one expected")
        if method == "GET":
            if self.lease is None:
                raise KubeApiError(404, "NotFound", "no lease")
            return self.lease
        self.lease = body
        return body


def test_an_unexpected_error_does_not_end_the_election_loop():
    api = _FlakyApi()
    a = LeaderElector(api, NAMESPACE, LEASE, "a", **FAST)
    a.start()
    try:
        wait_until(a.is_leader, what="a leads after a failed round")
        assert api.calls > 1
    finally:
        a.stop(release=False)


def test_the_documented_failover_bound_is_the_one_that_follows_from_the_lease_settings():
    import inspect
    from pathlib import Path

    from app.kube.leader import LeaderElector, takeover_bounds
    defaults = inspect.signature(LeaderElector).parameters
    low, high = takeover_bounds(defaults["lease_duration"].default, defaults["retry_period"].default)
    assert (low, high) == (13.0, 19.8)
    text = " ".join((paths.ROOT / "docs" / "service.md").read_text().split())
    assert f"between {low:g} and {high:g} s later" in text


# --- hand-over (a leader sent SIGTERM: app/listeners.py) ----------------------------------------------------
def test_a_leader_handing_over_serves_until_another_replica_holds_the_lease(fake_kube, elector):
    a, b = elector("a"), elector("b")
    a.start()
    wait_until(a.is_leader, what="a leads")
    b.start()
    successor: list = []
    handing = threading.Thread(target=lambda: successor.append(a.hand_over(timeout=TAKEOVER, interval=0.05)))
    handing.start()
    wait_until(lambda: not a.is_leader(), what="a stops leading at once")
    assert a.serving()                     # ... but answers until b can
    handing.join(TAKEOVER + 5)
    assert successor == ["b"] and b.is_leader()
    assert a.serving() and not a.is_leader()          # a fallback until it exits
    assert lease(fake_kube)["spec"]["holderIdentity"] == "b"


def test_a_standby_hands_nothing_over_and_stops_serving(fake_kube, elector):
    a, b = elector("a"), elector("b")
    a.start()
    wait_until(a.is_leader, what="a leads")
    b.start()
    wait_until(lambda: b.attempts >= 2, what="b tries")
    assert b.hand_over(timeout=TAKEOVER) is None
    assert not b.serving() and a.is_leader()


def test_a_hand_over_nobody_takes_ends_at_its_timeout(fake_kube, elector):
    a = elector("a")
    a.start()
    wait_until(a.is_leader, what="a leads")
    assert a.hand_over(timeout=0.5, interval=0.05) is None
    assert not lease(fake_kube)["spec"]["holderIdentity"]          # released all the same
