"""Issue 31 section 3: the victim search reads running pods from an index kept as pods come and go, not by
reading every pod object under the state lock when a refused gang is filtered."""
from __future__ import annotations

from app.scheduling.preemptor import RunningIndex, group_running
from app.state import POD_KIND

from service_helpers import filter_, job_pods, plain_pod
from test_preemption_service import JOB_B, llm_job, seed_client, terminate


def web_pods(count: int) -> list[dict]:
    pods = []
    for i in range(count):
        pod = plain_pod(f"web-{i}", cpu="1")
        pod["spec"]["nodeName"], pod["spec"]["priority"] = f"node-{i % 12:02d}", 0
        pod["status"] = {"phase": "Running"}
        pods.append(pod)
    return pods


class CountingObjects:
    """The object store, counting the pod objects read through it."""

    def __init__(self, objects):
        self.objects, self.pod_reads = objects, 0

    def get(self, kind, *args, **kwargs):
        self.pod_reads += kind == "Pod"
        return self.objects.get(kind, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.objects, name)


def test_the_gangs_filter_reads_no_running_pod_to_choose_victims():
    client, writer = seed_client()
    state = client.app.state.service
    for pod in web_pods(60):
        state.apply(POD_KIND, "ADDED", pod)
    counting = state.objects = CountingObjects(state.objects)
    filter_(client, job_pods(llm_job())[0])
    assert len(writer.evictions) == 4                   # it chose (job-b, the cheapest whole gang)
    assert counting.pod_reads < 20                      # its victims (a few reads each), not the 68 running pods


def test_the_victim_search_reads_the_preemptors_index_not_every_pod_again(monkeypatch):
    """Issue 29: the search snapshot took the preemptor's index through a back-reference the engine no
    longer sets (state.gangs), so each search built a fresh index from every pod under the lock."""
    client, writer = seed_client()
    state = client.app.state.service
    for pod in web_pods(60):
        state.apply(POD_KIND, "ADDED", pod)
    built = []
    original = RunningIndex.update
    monkeypatch.setattr(RunningIndex, "update", lambda self, key, pod: (built.append(key), original(self, key, pod))
                        if key is None else original(self, key, pod))
    filter_(client, job_pods(llm_job())[0])
    assert len(writer.evictions) == 4                   # it chose victims (job-b, the cheapest whole gang)
    assert built == []                                  # no index built from every pod: the one kept up to date


def as_sets(gangs) -> dict:
    return {g.key: (g.priority, sorted(g.pods), g.elastic) for g in gangs}


def test_the_index_follows_pods_that_start_finish_and_are_listed_again():
    client, _ = seed_client()
    state = client.app.state.service
    index = client.app.state.engine.preemptor.running
    pods = web_pods(3)
    for pod in pods:
        state.apply(POD_KIND, "ADDED", pod)
    terminate(client, JOB_B[:1] + ["default/web-1"])
    fresh = RunningIndex(state)                          # built from the objects as they are now
    assert as_sets(group_running(*index.snapshot())) == as_sets(group_running(*fresh.snapshot()))
    gangs = {g.key: sorted(g.pods) for g in group_running(*index.snapshot())}
    assert gangs["default/web-0"] == ["default/web-0"] and "default/web-1" not in gangs
    assert [pods for pods in gangs.values() if "research/job-b-1" in pods] == [JOB_B[1:]]
    state.replace(POD_KIND, [p for p in state.objects.list("Pod") if p["metadata"]["name"] != "web-0"])
    assert "default/web-0" not in {g.key for g in group_running(*index.snapshot())}
