"""A version upgrade while gangs are being scheduled, on the real control plane: the previous release
(tests/e2e/previous.py) runs as both extender replicas and the webhook, Jobs keep coming, and the release is
rolled to this checkout in the order docs/install.md's Upgrade section prescribes: the webhook configuration and
RBAC, then the extender replicas, then kube-scheduler with the new configuration. Every gang must be bound whole
in its rack, no pod admitted without its segment labels and env, nothing refused for the upgrade (no extender
call failing) and no gang evicted as stale."""
from __future__ import annotations

import re
import threading
import time

import pytest
import yaml
from cluster import E2ECluster, manifest, scheduler_config, webhook_config
import conftest
from controlplane import gates_from_env
from previous import previous_release
from service import Replica, Runtime
from workloads import RACK, distinct, indexed_job, segments, topology

NODES = {f"{z}{r}{n}": (f"zone-{z}", f"block-{z}", f"rack-{z}{r}") for z in "ab" for r in "12" for n in "1234"}
JOBS, PODS, GPUS = 14, 4, 2                 # 14 gangs of 4 pods x 2 GPUs and one in the rollout's gap: 120 of
                                            # the 128 GPUs, 4 gangs a rack
INTERVAL = 1.2                              # seconds between Jobs: the upgrade happens while they come
# what kube-scheduler says when an extender call fails (its FailedScheduling event); the extender's own
# refusals ("not known to the extender yet", a watch a moment behind) are retried as on any day
EXTENDER_ERRORS = re.compile(r"Post \"https|connection refused|connection reset|EOF|i/o timeout|no such host|"
                             r"deadline exceeded|failed calling", re.I)
SEGMENT_LABEL, SEGMENT_ENV = "kai.scheduler/segment-index", "KAI_SEGMENT_INDEX"


@pytest.fixture(scope="module")
def previous():
    runtime, commit = previous_release()
    if runtime is None:
        pytest.skip(commit)
    return runtime, commit


@pytest.fixture(scope="module")
def upgrade_cluster(tmp_path_factory, previous):
    """Its own control plane, the extender replicas running the previous release with its RBAC."""
    runtime, _ = previous
    for plane in conftest._plane(tmp_path_factory, gates_from_env()):
        e2e = E2ECluster(plane, replicas=2, runtime=runtime)
        try:
            e2e.install()
            e2e.apply(old_manifest(runtime, "extender-rbac.yaml"))
            yield e2e
        finally:
            e2e.stop()


def old_manifest(runtime: Runtime, name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((runtime.source / "manifests" / "base" / name).read_text()) if doc]


def roll_extender(cluster: E2ECluster, after_sigterm=lambda: None, after_exit=lambda: None) -> list[Replica]:
    """The extender's rollout as the Deployment does it (maxSurge 100%, maxUnavailable 100%): both new pods
    are created and both old ones sent SIGTERM at once. `after_sigterm` runs right then, `after_exit` once the
    old replicas have exited, both while the new ones cannot answer yet (they take seconds to start and sync).
    Returns the old replicas, stopped."""
    extender = cluster.extender
    old = [r for r in extender.replicas if r.process and r.process.popen.poll() is None]
    for _ in old:
        extender.start(extender.add(Runtime()))
    for replica in old:
        extender.terminate(replica)
    after_sigterm()
    for replica in old:
        replica.process.popen.wait(120)
    after_exit()
    extender.wait_leader(60)
    return old


def stop_scheduler(cluster: E2ECluster) -> None:
    """`kubectl scale --replicas=0 deployment/tas-scheduler`: no extender call while the extender rolls."""
    plane = cluster.plane
    scheduler = next(p for p in plane.processes if p.name == "tas-scheduler")
    scheduler.stop()
    plane.processes.remove(scheduler)


def start_scheduler(cluster: E2ECluster) -> None:
    """The scheduler's rollout: kube-scheduler with the new release's configuration."""
    plane = cluster.plane
    plane.start_scheduler("tas-scheduler", scheduler_config(cluster.verbs_url, plane.certs.ca_crt.read_bytes(),
                                                            cluster.scheduler_client))


def webhook(cluster: E2ECluster, failure_policy: str) -> dict:
    """The new release's MutatingWebhookConfiguration, with this failurePolicy (the upgrade's Fail while the
    extender rolls: `kubectl patch`)."""
    config = webhook_config(cluster.url, cluster.plane.certs.ca_crt.read_bytes())
    for hook in config["webhooks"]:
        assert hook["failurePolicy"] == "Ignore"
        hook["failurePolicy"] = failure_policy
    return config


def gangs_through(cluster: E2ECluster, name: str, steps: list[tuple[str, callable]]) -> list[tuple[str, int]]:
    """Rack gangs arriving every INTERVAL seconds while `steps` run, from the third Job on (each step is given
    a function that creates one more gang at once); then every gang must be bound whole in its rack with every
    pod mutated, no extender call failed, no gang evicted as stale and no pod failed. Returns each step with
    the number of Jobs created when it ended."""
    ns = conftest.TestNamespace(cluster, name)
    try:
        ns.add_nodes(NODES)
        created: list[str] = []

        def gang(job: str) -> None:
            ns.apply(indexed_job(job, PODS, GPUS, topology(required="rack"), segments(2, "rack")))
            created.append(job)

        def submit() -> None:
            for i in range(JOBS):
                gang(f"gang-{i}")
                time.sleep(INTERVAL)

        submitter = threading.Thread(target=submit, daemon=True)
        submitter.start()
        done: list[tuple[str, int]] = []
        time.sleep(3 * INTERVAL)
        for step, run in steps:
            run(gang)
            done.append((step, len(created)))
        submitter.join(120)
        assert len(created) == JOBS + 1, created
        assert done[-1][1] < JOBS, f"the rollout ended after the last Job was created: {done}"

        for job in created:
            bound = cluster.wait_bound(ns.name, PODS, f"job-name={job}", timeout=120)
            assert len(distinct(cluster, bound, RACK)) == 1, f"{job} spans racks"
            for pod in bound:
                env = {e.name for c in pod.spec.containers for e in (c.env or [])}
                assert SEGMENT_ENV in env and SEGMENT_LABEL in (pod.metadata.labels or {}), \
                    f"{pod.metadata.name} was admitted unmutated (steps: {done})"
        events = cluster.core.list_namespaced_event(ns.name).items
        failed = [f"{e.involved_object.name}: {e.message}" for e in events
                  if e.reason == "FailedScheduling" and EXTENDER_ERRORS.search(e.message or "")]
        assert not failed, f"steps: {done}\n" + "\n".join(failed)
        assert [e.message for e in events if e.reason == "StaleGangEvicted"] == []
        jobs = cluster.plane.kubectl("-n", ns.name, "get", "jobs", "-o", "jsonpath={.items[*].status.failed}")
        assert jobs.strip() == "", f"pods of the Jobs failed: {jobs}"
        turned_away = [e.message or "" for e in events if e.reason == "FailedCreate"]
        gap = sum("failed calling webhook" in m for m in turned_away)
        print(f"{name}: steps (Jobs created by then): {done}; pod creations turned away by the webhook failing "
              f"closed: {gap}, by the webhook waiting to see the Job: {len(turned_away) - gap}")
        return done
    finally:
        ns.close()


def test_upgrading_from_the_previous_release_refuses_and_leaves_unmutated_nothing(upgrade_cluster):
    """docs/install.md's Upgrade: the webhook configuration and RBAC, then the extender with kube-scheduler
    stopped and the webhook failing closed (the previous release stops listening at SIGTERM, before anyone
    else leads), then the webhook back to Ignore and kube-scheduler with the new configuration."""
    cluster = upgrade_cluster
    old = list(cluster.extender.replicas)
    assert all(r.runtime.source != Runtime().source for r in old)
    assert cluster.extender.wait_leader() in old
    gangs_through(cluster, "upgrade", [
        ("webhook", lambda _: cluster.apply(manifest("extender-rbac.yaml") + [webhook(cluster, "Ignore")])),
        ("pause", lambda _: time.sleep(2 * INTERVAL)),
        ("scheduler stopped", lambda _: stop_scheduler(cluster)),
        ("webhook fails closed", lambda _: cluster.apply([webhook(cluster, "Fail")])),
        # a Job once the previous release has stopped: its pods are created while no replica answers
        ("extender", lambda gang: roll_extender(cluster, after_exit=lambda: gang("in-the-gap"))),
        ("webhook ignores", lambda _: cluster.apply([webhook(cluster, "Ignore")])),
        ("scheduler", lambda _: start_scheduler(cluster)),
    ])
    leader = cluster.extender.wait_leader()
    assert leader not in old and leader.runtime == Runtime()


def test_rolling_this_release_hands_the_lease_over_with_nothing_refused_or_unmutated(upgrade_cluster):
    """From this release on, the extender's plain rollout (both pods replaced at once) while kube-scheduler
    keeps calling and the webhook ignores failures: the old leader hands its Lease over and answers until a
    new replica leads, so there is no gap to fail in."""
    cluster = upgrade_cluster
    leader = cluster.extender.wait_leader()
    if leader.runtime != Runtime():
        pytest.skip("the upgrade test before this one did not leave this release running")
    stopped: list[Replica] = []
    gangs_through(cluster, "rollout", [
        # a Job as the old leader is sent SIGTERM: its pods are created while it hands over
        ("extender", lambda gang: stopped.extend(roll_extender(cluster, after_sigterm=lambda: gang("in-the-gap"))))])
    assert leader in stopped and cluster.extender.wait_leader() not in stopped
    log = leader.process.log.read_text(errors="replace")
    assert "handed lease" in log and "holds lease" in log, leader.process.tail(20)
