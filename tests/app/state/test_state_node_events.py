"""Node events against the service's cluster model: a burst of them (a node pool scaling up or down)
costs one rebuild when the model is next refreshed (before a verb, or by a timer), not one per node."""
from __future__ import annotations

import copy
import time

import app.state.service as state_module
from app.state import NODE_KIND

from service_helpers import filter_, indexed_job, job_pods, make_client, node_names, service


def new_node(template: dict, name: str) -> dict:
    node = copy.deepcopy(template)
    node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    node["metadata"].pop("resourceVersion", None)
    return node


def demo_node(client) -> dict:
    return next(service(client).objects.list("Node"))


def test_a_burst_of_added_nodes_is_one_rebuild(monkeypatch):
    monkeypatch.setattr(state_module, "STALE_REBUILD_DELAY", 60.0)       # only refresh() rebuilds here
    client = make_client()
    state = service(client)
    before, count = state.rebuilds, len(node_names(client))
    template = demo_node(client)
    for i in range(40):
        state.apply(NODE_KIND, "ADDED", new_node(template, f"scale-up-{i}"))
    assert state.rebuilds == before                      # nothing refreshed the model yet
    state.refresh()
    assert len(state.cluster.node_names) == count + 40
    assert state.rebuilds == before + 1


def test_a_gang_filtered_after_the_burst_sees_the_new_nodes():
    job = indexed_job("late", 4, 8, required="block", segment=None)
    client = make_client(job)
    state = service(client)
    template = demo_node(client)
    for i in range(8):
        state.apply(NODE_KIND, "ADDED", new_node(template, f"scale-up-{i}"))
    names = node_names(client)
    assert "scale-up-7" in names
    answer = filter_(client, job_pods(job)[0], names)
    assert answer["Error"] == "" and len(answer["NodeNames"]) == 1


def test_deleted_nodes_are_gone_from_the_model_when_next_read():
    client = make_client()
    state = service(client)
    gone = list(state.objects.list("Node"))[:3]
    for node in gone:
        state.apply(NODE_KIND, "DELETED", node)
    names = set(node_names(client))
    assert not names & {n["metadata"]["name"] for n in gone}


def test_a_stale_model_is_rebuilt_soon_even_when_nothing_reads_it(monkeypatch):
    """Gangs on deleted nodes are re-planned (and their pods woken) by the rebuild: it must not wait for
    a request that may never come."""
    monkeypatch.setattr(state_module, "STALE_REBUILD_DELAY", 0.01)
    client = make_client()
    state = service(client)
    before = state.rebuilds
    template = demo_node(client)
    for i in range(5):
        state.apply(NODE_KIND, "ADDED", new_node(template, f"scale-up-{i}"))
    deadline = time.monotonic() + 5
    while state.rebuilds == before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert state.rebuilds == before + 1 and not state.stale


def test_a_filter_that_would_rebuild_the_model_runs_off_the_event_loop(monkeypatch):
    """A rebuild reads every node and pod (a second at fleet size): on the event loop it would hold up
    every other request, probes included."""
    import asyncio
    monkeypatch.setattr(state_module, "STALE_REBUILD_DELAY", 60.0)
    client = make_client()
    state = service(client)
    names = node_names(client)
    state.apply(NODE_KIND, "ADDED", new_node(demo_node(client), "scale-up-0"))
    on_loop = []
    real = state._rebuild

    def recorded():
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:                       # a worker thread: no event loop runs there
            on_loop.append(False)
        real()
    monkeypatch.setattr(state, "_rebuild", recorded)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default", "uid": "uid-web"},
           "spec": {"containers": [{"name": "main", "image": "web"}]}}
    answer = filter_(client, pod, names)
    assert answer["Error"] == "" and on_loop == [False]
