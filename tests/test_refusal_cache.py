"""Issue 14 item 1: a refused gang keeps its cached refusal until something that could change it
changes (room freed on a node it could use, the cluster rebuilt, its own pods), not on every pod event."""
from __future__ import annotations

import copy

from fastapi.testclient import TestClient

from app.server import create_app
from app.settings import Settings
from app.state import NODE_KIND, POD_KIND

from service_helpers import Clock, bind, failures, filter_, job_pods, plain_pod, refusal
from test_preemption_service import fabric_nodes, job, llm_job, running


def refused_client(**settings) -> TestClient:
    job_a = job("job-a", "research", 4, priority=2000)
    job_b = job("job-b", "research", 4, priority=2000)
    objects = fabric_nodes() + [job_a, job_b, llm_job()] + running(job_a, 0) + running(job_b, 4)
    app = create_app(Settings(**settings), objects=copy.deepcopy(objects), clock=Clock())
    return TestClient(app)


def plans_made(client: TestClient) -> float:
    registry = client.app.state.service.metrics.registry
    return registry.get_sample_value("tas_extender_planning_seconds_count", {"kind": "gang"}) or 0


def refuse(client: TestClient) -> str:
    answer = filter_(client, job_pods(llm_job())[0])
    assert answer["NodeNames"] == []
    return refusal(answer)


def test_pod_events_that_free_nothing_keep_the_refusal():
    client = refused_client()
    refuse(client)
    first = plans_made(client)
    for i in range(3):                            # plain pods start (and bind) on the free nodes
        pod = plain_pod(f"web-{i}", cpu="1")
        assert "node-08" in filter_(client, pod)["NodeNames"]
        assert bind(client, pod, "node-08") == ""
        refuse(client)
    state = client.app.state.service
    other = plain_pod("elsewhere")
    other["spec"]["nodeName"], other["status"] = "node-09", {"phase": "Running"}
    state.apply(POD_KIND, "ADDED", other)
    refuse(client)
    assert plans_made(client) == first


def test_room_freed_on_a_usable_node_plans_again():
    client = refused_client()
    refuse(client)
    first = plans_made(client)
    state = client.app.state.service
    state.apply(POD_KIND, "DELETED", state.find_pod("research", "job-b-0"))
    refuse(client)
    assert plans_made(client) == first + 1


def test_a_new_node_plans_again():
    client = refused_client()
    refuse(client)
    first = plans_made(client)
    state = client.app.state.service
    extra = copy.deepcopy(fabric_nodes()[11])
    extra["metadata"]["name"] = extra["metadata"]["labels"]["kubernetes.io/hostname"] = "node-12"
    state.apply(NODE_KIND, "ADDED", extra)
    refuse(client)
    assert plans_made(client) == first + 1


def test_room_freed_on_a_node_the_gang_cannot_use_keeps_the_refusal():
    client = refused_client()
    state = client.app.state.service
    tainted = copy.deepcopy(fabric_nodes()[0])
    tainted["metadata"]["name"] = tainted["metadata"]["labels"]["kubernetes.io/hostname"] = "node-99"
    tainted["spec"]["taints"] = [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]
    state.apply(NODE_KIND, "ADDED", tainted)
    infra = plain_pod("infra")
    infra["spec"]["nodeName"], infra["status"] = "node-99", {"phase": "Running"}
    state.apply(POD_KIND, "ADDED", infra)
    refuse(client)
    first = plans_made(client)
    state.apply(POD_KIND, "DELETED", infra)
    refuse(client)
    assert plans_made(client) == first


def test_the_victim_search_never_holds_the_lock_plain_pods_need():
    """Against the API (a blocking writer) the search runs on a snapshot in a thread: the gang's filter
    answers at once and plain pods are filtered while it runs; its choice is committed afterwards."""
    import threading
    from unittest.mock import patch

    import app.preemption as preemption_module
    from test_preemption_service import RecordingWriter, seed_client

    client, writer = seed_client()
    writer.blocking = True
    release, real = threading.Event(), preemption_module.select_victims

    def slow_search(*args, **kwargs):
        release.wait(timeout=30)
        return real(*args, **kwargs)

    answers = {}

    def call(name, pod):
        answers[name] = filter_(client, pod)

    with patch.object(preemption_module, "select_victims", slow_search):
        gang = threading.Thread(target=call, args=("gang", job_pods(llm_job())[0]))
        gang.start()
        gang.join(timeout=5)
        finished = not gang.is_alive()
        plain = threading.Thread(target=call, args=("plain", plain_pod("web", cpu="1")))
        plain.start()
        plain.join(timeout=5)
        plain_finished = not plain.is_alive()
        release.set()
        gang.join(timeout=30)
        plain.join(timeout=30)
        preemptor = client.app.state.service.gangs.preemptor
        if getattr(preemptor, "searcher", None) is not None:
            preemptor.searcher.join(timeout=30)
    assert finished and plain_finished
    assert answers["plain"]["NodeNames"]
    assert "looking for lower-priority pods" in refusal(answers["gang"])
    preemptor.sender.join(timeout=30)
    assert sorted(f"{ns}/{name}" for ns, name, _ in writer.evictions) == [f"research/job-b-{i}" for i in range(4)]
    assert "waiting for 4 victims" in refusal(filter_(client, job_pods(llm_job())[1]))


def test_a_change_of_the_gang_itself_plans_again():
    """Same pods, smaller requests (the workload was edited): the cached refusal no longer answers."""
    from app.state import kind_of

    client = refused_client()
    refuse(client)
    smaller = copy.deepcopy(llm_job())
    smaller["metadata"]["resourceVersion"] = "2"
    smaller["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "4"
    client.app.state.service.apply(kind_of(smaller), "MODIFIED", smaller)
    answer = filter_(client, job_pods(smaller)[0])
    assert len(answer["NodeNames"]) == 1, answer["FailedNodes"]


def test_per_pod_fields_the_job_controller_sets_keep_the_refusal():
    """Issue 31 section 4: the Job controller gives each pod its own spec.hostname (and subdomain, env);
    none of that changes the plan, so a retry by another pod of the gang keeps the cached refusal."""
    client = refused_client()
    pods = job_pods(llm_job())
    for index, pod in enumerate(pods):
        pod["spec"]["hostname"] = f"llm-{index}"
        pod["spec"]["subdomain"] = "llm"
        pod["spec"]["containers"][0]["env"] = [{"name": "JOB_COMPLETION_INDEX", "value": str(index)}]
    for pod in pods[:4]:
        assert filter_(client, pod)["NodeNames"] == []
    assert plans_made(client) == 1


def test_room_freed_never_replans_a_gang_that_can_never_fit():
    """Issue 31 section 3: "can never fit in this cluster, even when empty" holds whatever pods leave."""
    from app.state import kind_of
    from test_refusal_unresolvable import never_fits_job

    client = refused_client()
    state = client.app.state.service
    state.apply(kind_of(never_fits_job()), "ADDED", never_fits_job())
    pod = job_pods(never_fits_job())[0]
    assert "can never fit" in refusal(filter_(client, pod))
    first = plans_made(client)
    state.apply(POD_KIND, "DELETED", state.find_pod("research", "job-b-0"))
    assert "can never fit" in refusal(filter_(client, pod))
    assert plans_made(client) == first


def test_freed_cpu_keeps_the_refusal_of_a_gang_that_lacks_gpus():
    """A CPU pod leaves a node whose GPUs all run job-b: the gang still fits no more pods there."""
    client = refused_client()
    state = client.app.state.service
    web = plain_pod("web", cpu="8")
    web["spec"]["nodeName"], web["status"] = "node-04", {"phase": "Running"}
    state.apply(POD_KIND, "ADDED", web)
    refuse(client)
    first = plans_made(client)
    state.apply(POD_KIND, "DELETED", state.find_pod("default", "web"))
    refuse(client)
    assert plans_made(client) == first


def test_a_node_status_update_that_opens_nothing_keeps_the_refusal():
    """Nodes report status all the time; only a node turning Ready, uncordoned or untainted counts."""
    client = refused_client()
    state = client.app.state.service
    refuse(client)
    first = plans_made(client)
    node = copy.deepcopy(state.objects.get("Node", "", "node-09"))
    node["metadata"]["resourceVersion"] = "99"
    state.apply(NODE_KIND, "MODIFIED", node)
    refuse(client)
    assert plans_made(client) == first


def test_a_node_turning_ready_plans_again():
    """A NotReady node is not among the nodes the gang may use when it is refused; once Ready it is."""
    client = refused_client()
    state = client.app.state.service
    node = copy.deepcopy(state.objects.get("Node", "", "node-09"))
    node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    state.apply(NODE_KIND, "MODIFIED", node)
    refuse(client)
    first = plans_made(client)
    node = copy.deepcopy(node)
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    state.apply(NODE_KIND, "MODIFIED", node)
    refuse(client)
    assert plans_made(client) == first + 1


def test_more_candidates_from_kube_scheduler_plan_again():
    """kube-scheduler still counts a deleted job's terminating pods when our watch has freed their room:
    it offers one node of four and the gang is refused on it. Once it offers all four, nothing was freed
    in our model since, but the refusal was made on fewer candidates: the gang is planned again."""
    second = job("second", "research", 4, priority=0, annotations={
        "kai.scheduler/topology": "fabric", "kai.scheduler/topology-required-placement": "unit"})
    app = create_app(Settings(), objects=copy.deepcopy(fabric_nodes()[:4] + fabric_nodes()[-1:] + [second]), clock=Clock())
    client = TestClient(app)
    pods = job_pods(second)
    assert filter_(client, pods[0], ["node-00"])["NodeNames"] == []
    assert filter_(client, pods[1], ["node-00"])["NodeNames"] == []      # the same offer: the cached refusal
    assert plans_made(client) == 1
    answer = filter_(client, pods[0], [f"node-{i:02d}" for i in range(4)])
    assert len(answer["NodeNames"]) == 1, failures(answer)
