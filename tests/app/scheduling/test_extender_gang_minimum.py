"""Issue 13 item 2: a gang's pods get no node until at least its minimum exists."""
from __future__ import annotations

import pytest

from service_helpers import GPU, filter_, make_client, refusal, schedule, service

fakekube = pytest.importorskip("fakekube")
fake_kube = fakekube.fake_kube          # the fixture


def podgroup(name: str, min_member: int) -> dict:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"minMember": min_member}}


def member(group: str, index: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{group}-{index}", "namespace": "team-a", "uid": f"uid-{group}-{index}",
                         "resourceVersion": "1", "labels": {"scheduling.x-k8s.io/pod-group": group}},
            "spec": {"schedulerName": "tas-scheduler", "containers": [{"name": "main", "image": "trainer",
                                     "resources": {"limits": {GPU: "8"}, "requests": {GPU: "8"}}}]},
            "status": {"phase": "Pending"}}


def test_no_pod_gets_a_node_until_the_minimum_exists():
    client = make_client(podgroup("pg-x", 4))
    pods = [member("pg-x", i) for i in range(4)]
    answer = filter_(client, pods[0])
    assert answer["NodeNames"] == [] and answer["FailedNodes"] == {}
    # no eviction makes the missing pods exist: kube-scheduler must not run a preemption dry run for it
    nodes = len(service(client).cluster.nodes)
    assert refusal(answer) == f"waiting for 3 more pods of gang team-a/pg-x: 1 of 4 exist (the same on all {nodes} nodes)"
    assert service(client).cluster.capacity.reserved.sum() == 0          # nothing held while waiting
    for pod in pods[1:3]:
        assert filter_(client, pod)["NodeNames"] == []
    placed = [schedule(client, pod) for pod in reversed(pods)]           # the fourth arrives: all land
    assert all(placed) and len(set(placed)) == 4


def kai_podgroup(name: str, min_member: int) -> dict:
    return {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"minMember": min_member, "queue": "team-a"}}


def kai_member(group: str, index: int) -> dict:
    pod = member(group, index)
    pod["metadata"]["labels"] = {}
    pod["metadata"]["annotations"] = {"pod-group-name": group}
    return pod


def test_kai_podgroup_waits_for_its_min_member_too():
    client = make_client(kai_podgroup("pg-x", 4))
    pods = [kai_member("pg-x", i) for i in range(4)]
    answer = filter_(client, pods[0])
    assert answer["NodeNames"] == []
    nodes = len(service(client).cluster.nodes)
    assert refusal(answer) == f"waiting for 3 more pods of gang team-a/pg-x: 1 of 4 exist (the same on all {nodes} nodes)"
    filter_(client, pods[1])
    assert refusal(filter_(client, pods[2])) == \
        f"waiting for 1 more pods of gang team-a/pg-x: 3 of 4 exist (the same on all {nodes} nodes)"
    assert service(client).cluster.capacity.reserved.sum() == 0
    placed = [schedule(client, pod) for pod in reversed(pods)]
    assert len(set(placed)) == 4


def test_job_gang_waits_until_the_job_controller_created_all_its_pods(fake_kube):
    """Against an API server: the Job controller creates pods in batches; none gets a node (and nothing is
    reserved) until the parallelism the Job says exist, then the whole gang lands together."""
    import copy

    from fakekube import wait_until

    from app.kube import adapters
    from app.server import create_app
    from app.settings import Settings
    from fastapi.testclient import TestClient
    from service_helpers import indexed_job, job_pods
    from topology.demo import demo_objects

    fake_kube.install_crd("kai.scheduler", "v1alpha1", "topologies", "Topology", namespaced=False)
    for obj in demo_objects():
        if obj["kind"] in ("Node", "Pod") or obj["apiVersion"].startswith("kai.scheduler"):
            fake_kube.create(copy.deepcopy(obj))
    job = fake_kube.create(indexed_job("batchy", pods=4, gpus=8, segment=None))

    def create_pod(index: int) -> dict:
        pod = job_pods(job)[index]
        for field in ("uid", "resourceVersion"):
            pod["metadata"].pop(field, None)
        return fake_kube.create(pod)

    settings = Settings(in_cluster=False, kubeconfig="unused")
    with TestClient(create_app(settings, kube=lambda s: adapters(s, host=fake_kube.url))) as client:
        state = client.app.state.service
        wait_until(lambda: client.get("/readyz").status_code == 200, what="first sync")
        first = create_pod(0)
        wait_until(lambda: state.workload_pods.count(first) == 1, what="the first pod watched")
        answer = filter_(client, first)
        assert answer["NodeNames"] == []
        assert refusal(answer) == ("waiting for 3 more pods of gang team-a/pg-batchy-uid-batchy: 1 of 4 exist "
                                   f"(the same on all {len(state.cluster.nodes)} nodes)")
        assert state.cluster.capacity.reserved.sum() == 0
        rest = [create_pod(i) for i in range(1, 4)]
        wait_until(lambda: state.workload_pods.count(first) == 4, what="every pod watched")
        placed = [schedule(client, pod) for pod in [first, *rest]]
        assert len(set(placed)) == 4


def test_only_controllers_that_create_every_pod_at_once_make_the_gang_wait():
    from grouper.minimum import creates_all_at_once

    assert creates_all_at_once({"kind": "Job", "spec": {}})
    assert creates_all_at_once({"kind": "JobSet", "spec": {"replicatedJobs": [{"name": "w"}]}})
    assert not creates_all_at_once({"kind": "JobSet", "spec": {"startupPolicy": {"startupPolicyOrder": "InOrder"}}})
    assert not creates_all_at_once({"kind": "JobSet", "spec": {"replicatedJobs": [
        {"name": "w", "dependsOn": [{"name": "d", "status": "Ready"}]}]}})
    assert not creates_all_at_once({"kind": "StatefulSet", "spec": {}})      # OrderedReady waits for each pod
    assert not creates_all_at_once(None)


def test_the_last_pods_of_a_job_with_more_completions_than_parallelism_do_not_wait_for_a_full_batch():
    from grouper.minimum import waiting_message, workload_members
    from grouper import group_workload
    from service_helpers import indexed_job

    job = indexed_job("tail", pods=4, gpus=8, segment=None)
    job["spec"]["completions"] = 10
    job["status"] = {"succeeded": 8}                      # only 2 pods are left to run
    [tree] = group_workload(job)
    assert workload_members(tree, 2, job) == (2, 2) and waiting_message(tree, 2, 2) == ""
    assert workload_members(tree, 1, job) == (1, 2)
    assert waiting_message(tree, 1, 2) == "waiting for 1 more pods of gang team-a/pg-tail-uid-tail: 1 of 2 exist"
    del job["status"]
    assert workload_members(tree, 1, job) == (1, 4)


def test_roles_told_to_wait_are_planned_as_admitted_not_as_templated(fake_kube):
    """GPU nodes are tainted; only the admitted pods carry the toleration (ExtendedResourceToleration).
    The master's pod is filtered first and told to wait for the workers; when the last worker arrives the
    gang is planned with the master as admitted, not refused because its template lacks the toleration."""
    import copy

    from fakekube import wait_until

    from app.kube import adapters
    from app.server import create_app
    from app.settings import Settings
    from fastapi.testclient import TestClient
    from grouper import expand_pods
    from test_extender_admitted import admitted, gpu_tainted_nodes
    from test_extender_admitted_role import pytorch_job

    fake_kube.install_crd("kai.scheduler", "v1alpha1", "topologies", "Topology", namespaced=False)
    fake_kube.install_crd("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
    for obj in gpu_tainted_nodes():
        if obj["kind"] == "Node" or obj["apiVersion"].startswith("kai.scheduler"):
            fake_kube.create(copy.deepcopy(obj))
    job = fake_kube.create(pytorch_job(workers=4))
    pods = admitted(expand_pods(job))
    settings = Settings(in_cluster=False, kubeconfig="unused")
    with TestClient(create_app(settings, kube=lambda s: adapters(s, host=fake_kube.url))) as client:
        state = client.app.state.service
        wait_until(lambda: client.get("/readyz").status_code == 200, what="first sync")
        created = [fake_kube.create(pod) for pod in pods[:-1]]
        wait_until(lambda: state.workload_pods.count(created[0]) == 4, what="four pods watched")
        assert "waiting for 1 more pods" in next(iter(filter_(client, created[0])["FailedAndUnresolvableNodes"].values()))
        last = fake_kube.create(pods[-1])
        wait_until(lambda: state.workload_pods.count(last) == 5, what="every pod watched")
        answer = filter_(client, last)
        assert answer["NodeNames"], answer["FailedNodes"]
        placed = [schedule(client, pod) for pod in [*created, last]]
        assert all(placed) and service(client).cluster.capacity.free.min() >= 0


def test_a_podgroup_is_grouped_once_per_member_set_not_once_per_call():
    """Each pod of a PodGroup is filtered and bound (and retried): grouping the whole PodGroup on every
    call costs O(pods) per call, O(pods^2) per gang."""
    from unittest.mock import patch

    import app.scheduling.planning as planning_module
    import grouper.identity as identity_module
    client = make_client(kai_podgroup("pg-y", 8))
    pods = [kai_member("pg-y", i) for i in range(8)]
    for pod in pods[:7]:
        filter_(client, pod)                       # each arrival changes the member set: grouped again
    calls = []
    real = identity_module.group_podgroup

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    with patch.object(planning_module, "group_podgroup", counted, create=True), \
            patch.object(identity_module, "group_podgroup", counted):
        placed = [schedule(client, pod) for pod in reversed(pods)]
        for pod in pods:
            filter_(client, pod)                   # a late retry of a bound pod
    assert len(set(placed)) == 8
    assert len(calls) == 1                         # the eighth pod completes the set: one grouping


def test_a_podgroup_pods_slot_is_found_once_per_member_set_not_by_walking_every_member_per_call():
    """Issue 31: a PodGroup pod's slot is its position among its leaf's pods. Found pod by pod, each of a gang's
    filter and bind calls walked every member (8 ms a call at 256 members, O(pods^2) per gang); the slots of
    all members are found at once per member set, and agree with finding them one by one."""
    from unittest.mock import patch

    import grouper.identity as identity_module
    import grouper.podgroups as podgroups_module
    from app.scheduling import planning
    from grouper import identify_pod

    client = make_client(kai_podgroup("pg-z", 8))
    state = service(client)
    pods = [kai_member("pg-z", i) for i in range(8)]
    for pod in pods:
        filter_(client, pod)                       # delivered as the watch would; the last one plans the gang
    walks = []
    real = podgroups_module.leaf_pods

    def counted(*args, **kwargs):
        walks.append(1)
        return real(*args, **kwargs)
    with patch.object(identity_module, "leaf_pods", counted), patch.object(podgroups_module, "leaf_pods", counted):
        placed = [schedule(client, pod) for pod in reversed(pods)]
        for pod in pods:
            filter_(client, pod)                   # late retries of bound pods
    assert len(set(placed)) == 8
    assert len(walks) <= 2                         # one member set: its grouping and its slots, once each
    workload = state.objects.get("PodGroup", "team-a", "pg-z", group="scheduling.run.ai")
    for pod in pods:
        watched = state.find_pod("team-a", pod["metadata"]["name"])
        others = [p for p in state.podgroup_pods[("team-a", "pg-z")].values() if p is not watched]
        assert planning.identify(state, watched).slot == identify_pod(watched, workload, state.cluster.topologies,
                                                                      pods=others).slot


def test_a_members_subgroup_change_moves_the_slots_found_at_once():
    """The slots found at once are found again when a member's subgroup label changes (the member set's
    version moves), and a pod the index does not hold is identified alone."""
    import copy

    from app.scheduling import planning
    from app.state import POD_KIND

    group = kai_podgroup("pg-s", 2)
    group["spec"]["subGroups"] = [{"name": "a", "minMember": 1}, {"name": "b", "minMember": 1}]
    client = make_client(group)
    state = service(client)
    pods = [kai_member("pg-s", i) for i in range(2)]
    for pod in pods:
        pod["metadata"]["labels"] = {"kai.scheduler/subgroup-name": "a"}
        state.apply(POD_KIND, "ADDED", copy.deepcopy(pod))
    first = state.find_pod("team-a", "pg-s-1")
    assert planning.identify(state, first).slot.role == "a"
    moved = copy.deepcopy(first)
    moved["metadata"]["labels"] = {"kai.scheduler/subgroup-name": "b"}
    state.apply(POD_KIND, "MODIFIED", moved)
    assert planning.identify(state, state.find_pod("team-a", "pg-s-1")).slot.role == "b"
    assert planning.identify(state, state.find_pod("team-a", "pg-s-0")).slot.role == "a"
    assert planning.identify(state, copy.deepcopy(moved)).slot.role == "b"       # a copy: identified alone
