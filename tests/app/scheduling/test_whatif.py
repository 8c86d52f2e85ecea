"""The what-if advice (issue 34 part 3): GET /debug/whatif/<gang> and the refusal's "fits if ... is
evicted; this gang's priority cannot preempt it" clause, on the preemption seed cluster: twelve 8-GPU
nodes, leaf A (unit 0: nodes 0-3) and leaf B (units 1, 2: nodes 4-11); job-a runs on nodes 0-3 and
job-b on 4-7, both priority 0; llm (8 pods x 8 GPUs, two segments of 4 per unit, preferring one leaf)
arrives."""
from __future__ import annotations

from test_preemption_service import JOB_B, gang_key, job, llm_job, seed_client, terminate

from service_helpers import bind, filter_, job_pods, refusal


def whatif(client, gang: str) -> dict:
    answer = client.get(f"/debug/whatif/{gang}")
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_advice_equals_what_preemption_then_does():
    """dry-run first (nothing evicted): the advice names job-b in leaf-b; then with preemption on, the
    service evicts exactly job-b's pods, in that domain, and the gang lands where the advice said."""
    client, writer = seed_client("dry-run")
    pods = job_pods(llm_job())
    filter_(client, pods[0])
    advice = whatif(client, gang_key(client))
    assert advice["verdict"] == "preempts" and advice["domain"] == "spine-0/leaf-b"
    assert sorted(v["pod"] for v in advice["victims"]) == JOB_B
    assert all(v["can_preempt"] for v in advice["victims"])
    assert advice["evicted"]["nvidia.com/gpu"] == 32
    assert sorted(advice["placement"].values()) == [f"node-{i:02d}" for i in range(4, 12)]
    assert writer.evictions == []                            # the advice changes nothing

    client, writer = seed_client("on")
    filter_(client, pods[0])
    assert sorted(f"{ns}/{name}" for ns, name, _ in writer.evictions) == JOB_B
    terminate(client, JOB_B)
    placed = {}
    for pod in pods:
        node = filter_(client, pod)["NodeNames"][0]
        assert bind(client, pod, node) == ""
        placed[f"job-{pod['metadata']['name'].rsplit('-', 1)[1]}"] = node
    assert placed == advice["placement"]


def test_a_gang_of_too_low_a_priority_is_told_what_it_would_take():
    client, writer = seed_client(llm=llm_job(priority=-5))
    pods = job_pods(llm_job(priority=-5))
    answer = filter_(client, pods[0])
    reason = refusal(answer)
    assert ("fits in leaf-b if research/job-b (priority 0) is evicted; this gang's priority -5 cannot preempt it"
            in reason)
    assert writer.evictions == []
    advice = whatif(client, gang_key(client))
    assert advice["verdict"] == "needs-priority" and advice["domain"] == "spine-0/leaf-b"
    assert advice["text"] == ("fits in leaf-b if research/job-b (priority 0) is evicted; this gang's priority -5 "
                              "cannot preempt it")
    assert {v["can_preempt"] for v in advice["victims"]} == {False}


def test_a_gang_no_eviction_can_help_needs_more_nodes():
    huge = job("llm", "prod", 9, priority=1000,                 # 9 x 8 GPUs in one leaf: leaves have 4 and 8 nodes
               annotations={"kai.scheduler/topology": "fabric", "kai.scheduler/topology-required-placement": "leaf"})
    client, _ = seed_client(llm=huge)
    filter_(client, job_pods(huge)[0])
    advice = whatif(client, gang_key(client))
    assert advice["verdict"] == "needs-nodes" and "only more nodes" in advice["text"]
    assert "any priority" in advice["text"] and "4611686018427387904" not in advice["text"]
    assert advice["victims"] == []


def test_a_pod_disruption_budget_keeps_its_gang_out_of_the_advice_and_of_preemption():
    """job-b is protected by a budget that allows no disruption, so leaf B cannot be emptied and leaf A
    (4 nodes) is too small: the advice evicts job-a and places the gang across spine-0, and preemption
    (dry-run) chooses the same."""
    client, writer = seed_client("dry-run")
    state = client.app.state.service
    from app.state.service import kind_of
    budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
              "metadata": {"name": "keep-b", "namespace": "research"},
              "spec": {"selector": {"matchLabels": {"job-name": "job-b"}}, "minAvailable": 4},
              "status": {"disruptionsAllowed": 0}}
    state.apply(kind_of(budget), "ADDED", budget)
    filter_(client, job_pods(llm_job())[0])
    advice = whatif(client, gang_key(client))
    assert advice["protected_by_budgets"] == {"research/job-b": "research/keep-b"}
    assert advice["domain"] == "spine-0" and {v["gang"] for v in advice["victims"]} == {"research/job-a"}
    plan = client.get(f"/debug/plans/{gang_key(client)}").json()
    assert plan["preemption"]["domain"] == "spine-0"
    assert {v["gang"] for v in plan["preemption"]["victims"]} == {"research/job-a"}


def test_an_unknown_gang_is_a_404_naming_the_known_ones():
    client, _ = seed_client()
    answer = client.get("/debug/whatif/prod/nothing")
    assert answer.status_code == 404 and "known gangs" in answer.json()["detail"]


def test_plan_whatif_offline_gives_the_same_advice(tmp_path, capsys):
    """`tas-extender plan --whatif` on a dump of the same cluster: the same victims and domain."""
    import copy
    import json

    from app.cli import main
    from test_preemption_service import fabric_nodes, running

    job_a, job_b = job("job-a", "research", 4, priority=0), job("job-b", "research", 4, priority=0)
    objects = fabric_nodes() + [job_a, job_b] + running(job_a, 0) + running(job_b, 4)
    for pod in objects:
        if pod["kind"] == "Pod":
            pod.setdefault("status", {})["phase"] = "Running"
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": copy.deepcopy(objects)}))
    workload = tmp_path / "llm.json"
    for priority, verdict in ((1000, "preempts"), (-5, "needs-priority")):
        workload.write_text(json.dumps(llm_job(priority=priority)))
        assert main(["plan", "--cluster", str(cluster), "--workload", str(workload), "--whatif", "-o", "json"]) == 1
        gang = json.loads(capsys.readouterr().out)["gangs"][0]
        assert gang["whatif"]["verdict"] == verdict and gang["whatif"]["domain"] == "spine-0/leaf-b"
        assert sorted(v["pod"] for v in gang["whatif"]["victims"]) == JOB_B
    assert main(["plan", "--cluster", str(cluster), "--workload", str(workload), "--whatif"]) == 1
    out = capsys.readouterr().out
    assert ("what if: needs-priority: fits in leaf-b if research/job-b (priority 0) is evicted; this gang's "
            "priority -5 cannot preempt it") in out
    assert "    evict research/job-b-0 on node-04 (gang research/job-b, priority 0)" in out
    assert "then the gang lands in spine-0/leaf-b on 8 node(s): node-04" in out


def test_a_gang_that_never_reached_the_extender_gets_the_same_advice_by_its_workload_name():
    """kube-scheduler's own filters may leave no node for a gang pod (it fits on no single node), so the
    extender never plans the gang; its pending pods are enough to advise it, by gang key or workload name."""
    from app.state import POD_KIND

    client, writer = seed_client(llm=llm_job(priority=-5))
    state = client.app.state.service
    pods = job_pods(llm_job(priority=-5))
    state.apply(POD_KIND, "ADDED", pods[0])                  # pending, never sent through filter
    assert client.get("/debug/plans").json()["plans"] == []
    advice = whatif(client, "prod/llm")
    assert advice["status"] == "unplanned" and advice["verdict"] == "needs-priority"
    assert advice["domain"] == "spine-0/leaf-b" and sorted(v["pod"] for v in advice["victims"]) == JOB_B
    assert whatif(client, advice["gang"])["domain"] == "spine-0/leaf-b"       # by the gang's key too
    assert writer.evictions == [] and client.get("/debug/plans").json()["plans"] == []


def test_a_gang_kube_scheduler_refused_itself_is_listed_with_its_message_for_the_page():
    """Defect: a gang whose pods kube-scheduler refuses in its own filters got the what-if advice but no card:
    /debug/plans (which the page draws) listed only planned gangs. Its pods marked unschedulable by
    kube-scheduler now make an `unplanned` entry with kube-scheduler's message; a pod it has not tried yet
    does not."""
    from app.state import POD_KIND

    client, _ = seed_client(llm=llm_job(priority=-5))
    state = client.app.state.service
    first, second = job_pods(llm_job(priority=-5))[:2]
    state.apply(POD_KIND, "ADDED", first)                    # not tried by kube-scheduler yet
    assert client.get("/debug/plans").json()["unplanned"] == []
    message = "0/12 nodes are available: 12 Insufficient nvidia.com/gpu."
    for pod in (first, second):
        pod.setdefault("status", {})["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]
        state.apply(POD_KIND, "MODIFIED", pod)
    body = client.get("/debug/plans").json()
    assert body["plans"] == []
    (entry,) = body["unplanned"]
    assert entry["status"] == "unplanned" and entry["workload"] == "llm" and entry["counts"] == {"pending": 2}
    assert message in entry["reason"] and entry["priority"] == -5
    assert whatif(client, entry["gang"])["verdict"] == "needs-priority"       # the card's button asks this
