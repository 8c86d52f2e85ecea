"""Gang preemption on a full cluster, repeated (issue 40, "the parked last member"): the last member of a
preempting gang could sit in kube-scheduler's queue after its siblings bound, with no event to move it, until
the stale-gang rule evicted the bound members and the Job's backoff limit ended the Job. Every repeat must
bind the whole gang with no stale-gang eviction and no failed pod in its Job. TAS_E2E_GATES=on runs it with
the native gates. Figures (runs, failures) are in docs/troubleshooting.md."""
from __future__ import annotations

import re

import pytest
from kubernetes import client as k8s

from test_e2e_priority import (  # noqa: F401 - fixtures
    busy_cluster,
    test_preemption_evicts_replicaset_pods_of_one_block_only_never_daemonset_pods as preempt_replicaset_pods,
    test_priority_class_gang_preempts_one_low_gang_inside_one_block as preempt_a_low_gang)

REPEATS = 5


def stale_evictions(cluster) -> float:
    match = re.search(r"^tas_extender_stale_gang_evictions_total (\S+)$", cluster.metrics(), re.MULTILINE)
    assert match, "the extender's /metrics has no tas_extender_stale_gang_evictions_total"
    return float(match.group(1))


def assert_nothing_lost(cluster, namespace: str, evictions_before: float) -> None:
    job = k8s.BatchV1Api(cluster.api).read_namespaced_job("urgent", namespace)
    assert not job.status.failed, f"the urgent Job lost {job.status.failed} pods:\n{cluster.describe(namespace)}"
    events = cluster.core.list_namespaced_event(namespace, field_selector="reason=StaleGangEvicted").items
    assert not events, [e.message for e in events]
    assert stale_evictions(cluster) == evictions_before


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_a_gang_preempting_replicaset_pods_binds_whole_every_time(cluster, busy_cluster, repeat):
    before = stale_evictions(cluster)
    preempt_replicaset_pods(cluster, busy_cluster)
    assert_nothing_lost(cluster, busy_cluster.name, before)


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_a_gang_preempting_a_low_gang_binds_whole_every_time(cluster, ns, priority_classes, repeat):
    before = stale_evictions(cluster)
    preempt_a_low_gang(cluster, ns, priority_classes)
    assert_nothing_lost(cluster, ns.name, before)
