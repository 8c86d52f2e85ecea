"""Properties of whole gangs scheduled pod by pod through the extender on the demo cluster: all or
nothing, never over capacity, required domains and segments respected, nothing left reserved."""
from __future__ import annotations

import time

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.server import create_app
from app.settings import Settings
from topology.demo import demo_objects

from service_helpers import bind, domain_of, failures, filter_, indexed_job, job_pods, make_client, prioritize, refusal, service


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods=st.integers(1, 12), gpus=st.sampled_from([1, 2, 4, 8]),
       required=st.sampled_from([None, "zone", "block", "rack"]), segment=st.sampled_from([None, 2, 4]),
       strategy=st.sampled_from(["binpack", "spread"]))
def test_a_gang_is_placed_whole_inside_its_domains_or_refused_everywhere(pods, gpus, required, segment, strategy):
    if segment and segment > pods:
        segment = None
    job = indexed_job("g", pods=pods, gpus=gpus, required=required, segment=segment)
    client = make_client(job, strategy=strategy)
    state = service(client)
    placed = {}
    for pod in job_pods(job):
        answer = filter_(client, pod)
        if not answer["NodeNames"]:
            assert not placed, "a gang is refused before its first pod, never halfway"
            assert len(set(failures(answer).values())) == 1
            assert refusal(answer).startswith("gang team-a/pg-g-uid-g (")
            assert state.plans.reservation_count() == 0
            return
        assert len(answer["NodeNames"]) == 1
        node = answer["NodeNames"][0]
        assert prioritize(client, pod, answer["NodeNames"]) == {node: 10}
        assert bind(client, pod, node) == ""
        placed[int(pod["metadata"]["name"].rsplit("-", 1)[1])] = node
    assert (state.cluster.free >= 0).all()
    assert state.plans.reservation_count() == 0
    if required:
        assert len({domain_of(client, n, required) for n in placed.values()}) == 1
    if segment:
        for start in range(0, pods, segment):
            members = [placed[i] for i in range(start, min(start + segment, pods))]
            assert len({domain_of(client, n, "rack") for n in members}) == 1


def test_reservations_expire_in_the_background_while_serving():
    job = indexed_job("llama", pods=8, gpus=4)
    app = create_app(Settings(reservation_ttl=0.5), objects=[*demo_objects(), job])
    with TestClient(app) as client:
        filter_(client, job_pods(job)[0])
        assert service(client).plans.reservation_count() == 8
        deadline = time.monotonic() + 10
        while service(client).plans.reservation_count() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert service(client).plans.reservation_count() == 0
        assert client.get("/debug/plans").json()["plans"] == []


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods=st.integers(2, 10), gpus=st.sampled_from([2, 4, 8]), required=st.sampled_from(["zone", "block"]),
       segment=st.sampled_from([None, 2]), bound_first=st.integers(0, 9), data=st.data())
def test_a_node_failing_midway_never_breaks_the_plan(pods, gpus, required, segment, bound_first, data):
    from app.state import NODE_KIND
    job = indexed_job("g", pods=pods, gpus=gpus, required=required, segment=segment)
    client = make_client(job)
    state = service(client)
    all_pods = job_pods(job)
    placed = {}
    bound_first = min(bound_first, pods - 1)
    for i, pod in enumerate(all_pods):
        if i == bound_first:
            plan = state.plans.get("team-a/pg-g-uid-g")
            if plan is None or plan.status == "refused":
                return
            waiting = sorted({s.node for s in plan.slots.values() if s.status == "planned"})
            broken = data.draw(st.sampled_from(waiting))
            node = next(o for o in state.objects.list("Node") if o["metadata"]["name"] == broken)
            state.apply(NODE_KIND, "MODIFIED", {**node, "status": {**node["status"], "conditions": [
                {"type": "Ready", "status": "False"}]}})
            assert all(s.node != broken for s in plan.slots.values() if s.status == "planned")
        answer = filter_(client, pod)
        if not answer["NodeNames"]:
            assert refusal(answer).startswith("gang team-a/pg-g-uid-g (")
            continue
        node = answer["NodeNames"][0]
        assert bind(client, pod, node) == ""
        placed[i] = node
    assert (state.cluster.free >= 0).all()
    assert len({domain_of(client, n, required) for n in placed.values()}) <= 1
    if segment:
        for start in range(0, pods, segment):
            members = [placed[i] for i in range(start, min(start + segment, pods)) if i in placed]
            assert len({domain_of(client, n, "rack") for n in members}) <= 1
