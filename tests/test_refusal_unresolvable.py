"""Issue 31 section 4: a refused gang that no eviction can help is answered as FailedAndUnresolvableNodes,
so kube-scheduler skips its preemption dry run (serial in its cycle, over every node) on each retry; and
the preempt verb answers such a gang at once, without filtering it over every node again."""
from __future__ import annotations

from unittest.mock import patch

from app.extender.gang import GangScheduler

from service_helpers import filter_, job_pods, watch
from test_preemption_service import job, llm_job, preempt, seed_client
from test_refusal_cache import plans_made, refused_client


def never_fits_job() -> dict:
    """Thirteen 8-GPU pods in one leaf: the largest leaf has eight 8-GPU nodes, even when empty."""
    return job("huge", "prod", 13, priority=5000, annotations={
        "kai.scheduler/topology": "fabric", "kai.scheduler/topology-required-placement": "leaf"})


def refused_answer(client, pod) -> tuple[dict, dict]:
    answer = filter_(client, pod)
    assert answer["NodeNames"] == []
    return answer["FailedNodes"], answer["FailedAndUnresolvableNodes"]


def test_a_gang_that_can_never_fit_is_unresolvable():
    client, writer = seed_client(llm=never_fits_job())
    resolvable, unresolvable = refused_answer(client, job_pods(never_fits_job())[0])
    assert resolvable == {} and unresolvable
    assert "can never fit" in next(iter(unresolvable.values()))
    assert writer.evictions == []              # lower-priority pods run, but no eviction makes room


def test_a_refused_gang_no_victim_helps_is_unresolvable():
    """The running gangs outrank it: nothing to preempt, so kube-scheduler's dry run would be wasted."""
    client = refused_client()
    resolvable, unresolvable = refused_answer(client, job_pods(llm_job())[0])
    assert resolvable == {} and unresolvable


def test_the_preempt_verb_answers_a_gang_that_can_never_fit_at_once():
    client, _ = seed_client(llm=never_fits_job())
    pod = job_pods(never_fits_job())[0]
    refused_answer(client, pod)
    planned = plans_made(client)
    with patch.object(GangScheduler, "filter", autospec=True, side_effect=GangScheduler.filter) as filtered:
        assert preempt(client, pod, {"node-04": ["uid-job-b-0"], "node-05": ["uid-job-b-1"]}) == {}
    assert filtered.call_count == 0 and plans_made(client) == planned


def test_a_gang_being_preempted_for_stays_resolvable():
    """While its victims terminate, kube-scheduler's preemption nominates the pod to its planned node."""
    client, writer = seed_client()
    resolvable, unresolvable = refused_answer(client, job_pods(llm_job())[0])
    assert writer.evictions and resolvable and unresolvable == {}


def test_an_unresolvable_refusal_names_one_node_with_the_whole_reason():
    """Issue 31 section 5: not the same reason once per node (megabytes at 16k nodes, parsed on
    kube-scheduler's loop). kube-scheduler counts the nodes left out as unresolvable with no reason of
    their own, so its event reads `0/12 nodes are available: 1 <the reason>`: the reason says it holds on
    every node and where the whole plan is."""
    client, _ = seed_client(llm=never_fits_job())
    watch(client, job_pods(never_fits_job())[0])
    response = client.post("/scheduler/filter", json={"Pod": job_pods(never_fits_job())[0], "Nodes": None,
                                                       "NodeNames": [f"node-{i:02d}" for i in range(12)]})
    answer = response.json()
    assert answer["FailedNodes"] == {} and list(answer["FailedAndUnresolvableNodes"]) == ["node-00"]
    reason = answer["FailedAndUnresolvableNodes"]["node-00"]
    gang = client.get("/debug/plans").json()["plans"][-1]["gang"]
    assert reason.startswith(f"gang {gang} (13 pods x 8 nvidia.com/gpu): can never fit in this cluster")
    assert reason.endswith(f"(the same on all 12 nodes; see /debug/plans/{gang})")
    assert client.get(f"/debug/plans/{gang}").json()["reason"] in reason
