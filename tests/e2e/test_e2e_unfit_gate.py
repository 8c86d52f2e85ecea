"""A gang that cannot fit leaves kube-scheduler's queue (issue 39, --gate-unfit-gangs): the webhook gates its
pods at creation, plain pods keep binding, and the moment room frees the service lifts every member's gate
and the gang binds whole."""
from __future__ import annotations

import time

import pytest

from workloads import RACK, assert_no_node_over, container, distinct, indexed_job, topology

FITS_GATE = "tas-extender.io/gang-fits"
GATING = ("--gate-unfit-gangs", "--preemption", "off")    # the gate is on by default; preemption is not


@pytest.fixture
def gating(cluster):
    """The suite's service restarted with the gate on (preemption off: the gang fits by no eviction)."""
    extender = cluster.extender
    saved = extender.extra_args
    _restart(extender, (*saved, *GATING))
    try:
        yield cluster
    finally:
        _restart(extender, saved)


def _restart(extender, args: tuple[str, ...]) -> None:
    extender.extra_args = args
    for replica in extender.replicas:
        extender.stop_replica(replica)
        extender.start(replica)
    extender.wait_leader()


def _plain(name: str, gpus: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": "tas-scheduler", "containers": [container(gpus, cpu="10m")]}}


def _gates(pod) -> list[str]:
    return [gate.name for gate in pod.spec.scheduling_gates or ()]


def test_a_gang_that_cannot_fit_is_gated_until_room_frees_then_binds_whole(gating, ns):
    cluster = gating
    ns.add_nodes({f"n{i}": ("zone-a", "block-a", "rack-a") for i in range(4)})
    ns.apply(_plain("filler-0", 8), _plain("filler-1", 8))
    cluster.wait_bound(ns.name, 2)
    job = indexed_job("big", 4, 8, topology(required="rack"))
    job["metadata"]["annotations"]["tas-extender.io/native-gate"] = "off"   # our gate, with TAS_E2E_GATES=on too
    ns.apply(job)
    deadline = time.monotonic() + 30
    while len(members := cluster.pods(ns.name, "job-name=big")) < 4 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert [_gates(p) for p in members] == [[FITS_GATE]] * 4
    ns.apply(_plain("web", 1))                          # plain pods keep binding beside the gated gang
    assert any(p.metadata.name == "web" for p in cluster.wait_bound(ns.name, 3))
    time.sleep(2)
    assert not [p for p in cluster.pods(ns.name, "job-name=big") if p.spec.node_name or not _gates(p)]
    started = time.monotonic()
    for name in ("filler-0", "filler-1", "web"):
        cluster.core.delete_namespaced_pod(name, ns.name, grace_period_seconds=0)
    bound = cluster.wait_bound(ns.name, 4, "job-name=big", timeout=40)
    waited = time.monotonic() - started
    assert waited < 30, f"the gang bound {waited:.0f}s after room freed: the safety bound, not the check, lifted it"
    assert [_gates(p) for p in bound] == [[]] * 4
    assert len(distinct(cluster, bound, RACK)) == 1
    assert_no_node_over(cluster, 8)
