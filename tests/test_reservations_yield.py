"""Issue 14 item 3: reservations yield to priority. A higher-priority gang takes capacity that lower-
priority gangs only reserve (no pod bound); a gang that must wait for a reservation is told whose."""
from __future__ import annotations

import copy

from fastapi.testclient import TestClient

from app.server import create_app
from app.settings import Settings

from service_helpers import Clock, filter_, job_pods, refusal
from test_preemption_service import fabric_nodes, job, llm_job, running


def batch_job(priority: int) -> dict:
    return job("batch", "research", 8, priority=priority,
               annotations={"kai.scheduler/topology": "fabric", "kai.scheduler/topology-required-placement": "leaf"})


def client_with(batch_priority: int) -> TestClient:
    guard = job("guard", "ops", 4, priority=5000)          # leaf-a is full: only leaf-b holds 8 nodes
    objects = fabric_nodes() + [guard, batch_job(batch_priority), llm_job()] + running(guard, 0)
    app = create_app(Settings(preemption="off"), objects=copy.deepcopy(objects), clock=Clock())
    return TestClient(app)


def reason(answer: dict) -> str:
    return refusal(answer)


def plans(client: TestClient) -> dict[str, dict]:
    return {p["gang"]: p for p in client.get("/debug/plans").json()["plans"]}


def test_a_higher_priority_gang_takes_capacity_a_lower_one_only_reserves():
    client = client_with(batch_priority=0)
    batch, llm = job_pods(batch_job(0)), job_pods(llm_job())
    assert len(filter_(client, batch[0])["NodeNames"]) == 1            # batch reserves leaf-b
    answer = filter_(client, llm[0])
    assert len(answer["NodeNames"]) == 1, reason(answer)               # llm takes it
    # batch lost its plan; its next pod plans again and waits, told for whom the room is held
    answer = filter_(client, batch[1])
    assert answer["NodeNames"] == []
    assert "reserved for gang prod/" in reason(answer) and " until " in reason(answer)


def test_equal_priority_waits_and_the_refusal_names_the_reservation():
    client = client_with(batch_priority=1000)
    batch, llm = job_pods(batch_job(1000)), job_pods(llm_job())
    assert len(filter_(client, batch[0])["NodeNames"]) == 1
    answer = filter_(client, llm[0])
    assert answer["NodeNames"] == []
    batch_key = next(key for key in plans(client) if key.startswith("research/"))
    assert f"reserved for gang {batch_key} until " in reason(answer)
    assert "insufficient" not in reason(answer)
    # batch keeps its plan
    assert len(filter_(client, batch[1])["NodeNames"]) == 1
