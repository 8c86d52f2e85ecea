"""Two replicas with leader election on a Lease (issue 12 scenario 6): the leader dies mid-gang, the
standby takes over, the gang completes in its domains and no node is booked twice."""
from __future__ import annotations

from controlplane import free_port
from service import Replica
from workloads import BLOCK, ELSEWHERE, RACK, THREE_RACKS, assert_no_node_over, distinct, gated_gang, release


def test_standby_takes_over_when_the_leader_dies_mid_gang(cluster, ns):
    extender = cluster.extender
    standby = Replica(f"tas-extender-{len(extender.replicas)}", free_port())
    extender.replicas.append(standby)
    extender.start(standby)
    ns.add_nodes({**THREE_RACKS, **ELSEWHERE})
    held = gated_gang(cluster, ns, "failover", range(4, 8))
    first = cluster.wait_bound(ns.name, 4)
    leader = extender.leader()
    assert leader is not standby and not standby.ready(extender.ca), "the standby must not serve"
    extender.kill(leader)                          # no chance to release the Lease: it must expire
    try:
        assert extender.wait_leader(timeout=60) is standby
        release(cluster, ns, held)
        bound = cluster.wait_bound(ns.name, 8, timeout=90)
    finally:
        extender.start(leader)                     # back as the standby for the tests after this one
    assert distinct(cluster, first, BLOCK) == distinct(cluster, bound, BLOCK)
    assert len(distinct(cluster, [p for p in bound if p.metadata.name in held], RACK)) == 1
    assert len({p.spec.node_name for p in bound}) == 8
    assert_no_node_over(cluster, 8)
