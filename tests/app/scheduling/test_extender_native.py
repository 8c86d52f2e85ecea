"""Native PodGroups (scheduling.k8s.io) through the extender's verbs, in standalone mode on the demo cluster."""
from __future__ import annotations

from service_helpers import GPU, bind, domain_of, filter_, make_client, node_names, service, watch

RACK = "network.example.com/rack"


def reason(answer: dict) -> str:
    failed = {**answer["FailedNodes"], **answer.get("FailedAndUnresolvableNodes", {})}
    return next(iter(failed.values()))


def native_podgroup(name="pg", minimum=8, key=RACK, namespace="team"):
    spec = {"schedulingPolicy": {"gang": {"minCount": minimum}}}
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": spec}


def member(name, group="pg", namespace="team", gpus=2):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": {"schedulingGroup": {"podGroupName": group},
                     "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: str(gpus)}}}]},
            "status": {"phase": "Pending"}}


def test_a_native_podgroup_waits_for_min_count_then_lands_in_one_rack():
    client = make_client(native_podgroup())
    pods = [member(f"w-{i}") for i in range(8)]
    for pod in pods[:7]:                       # pods come one by one: none gets a node before the 8th exists
        answer = filter_(client, pod)
        assert not answer["NodeNames"]
        assert "waiting for" in reason(answer)
    nodes = {}
    for pod in [pods[7], *pods[:7]]:
        answer = filter_(client, pod)
        assert len(answer["NodeNames"]) == 1, reason(answer)
        assert bind(client, pod, answer["NodeNames"][0]) == ""
        nodes[pod["metadata"]["name"]] = answer["NodeNames"][0]
    assert len({domain_of(client, node, "rack") for node in nodes.values()}) == 1
    plans = client.get("/debug/plans").json()["plans"]
    assert [p["gang"] for p in plans] == ["team/pg"]
    plan = client.get("/debug/plans/team/pg").json()
    assert len(plan["slots"]) == 8 and {s["status"] for s in plan["slots"]} == {"bound"}
    assert service(client).plans.get("team/pg").owner == ("scheduling.k8s.io", "PodGroup", "team", "pg")


def test_an_unknown_key_refuses_the_gang_and_shows_in_debug_plans():
    client = make_client(native_podgroup(minimum=1, key="example.com/pod-set"))
    answer = filter_(client, member("w-0"))
    assert not answer["NodeNames"]
    why = reason(answer)
    assert "example.com/pod-set" in why and "no topology has as a level" in why
    problems = client.get("/debug/plans").json()["native"]
    assert any("example.com/pod-set" in p["problem"] and p["podgroup"] == "team/pg" for p in problems)


def test_a_missing_podgroup_is_refused_and_shown():
    client = make_client()
    answer = filter_(client, member("w-0", group="nowhere"))
    assert not answer["NodeNames"]
    assert "PodGroup team/nowhere" in reason(answer)
    problems = client.get("/debug/plans").json()["native"]
    assert any(p["podgroup"] == "team/nowhere" and "does not exist" in p["problem"] for p in problems)


def test_a_basic_podgroup_is_no_gang():
    podgroup = native_podgroup(key=None)
    podgroup["spec"]["schedulingPolicy"] = {"basic": {}}
    client = make_client(podgroup)
    answer = filter_(client, member("w-0"))
    assert len(answer["NodeNames"]) > 1                     # a plain pod: every node that fits passes
    assert service(client).plans.get("team/pg") is None


# --- the webhook's warnings -------------------------------------------------------------------------

def _admit_warnings(podgroups: list[dict], pod: dict) -> list[str]:
    from fastapi.testclient import TestClient
    from webhook_helpers import make_app, post, review_of
    app, _ = make_app(podgroups)
    status, body = post(TestClient(app), review_of(pod, "Job", seed=pod["metadata"]["name"]))
    assert status == 200 and body["response"]["allowed"]
    return body["response"].get("warnings") or []


def test_the_webhook_warns_about_a_missing_podgroup_an_unknown_key_and_min_count_zero():
    missing = _admit_warnings([], member("w-0", group="nowhere"))
    assert any("PodGroup team/nowhere does not exist" in w for w in missing)
    unknown = _admit_warnings([native_podgroup(key="example.com/pod-set")], member("w-0"))
    assert any("example.com/pod-set" in w and "valid keys" in w for w in unknown)
    zero = native_podgroup()
    zero["spec"]["schedulingPolicy"]["gang"]["minCount"] = 0
    assert any("gang.minCount=0 is invalid" in w for w in _admit_warnings([zero], member("w-0")))
    assert _admit_warnings([native_podgroup()], member("w-0")) == []


# --- the native gate for our own gangs -----------------------------------------------------------------

class FakeGate:
    def __init__(self, served: bool = True):
        self.served, self.asked = served, []

    def active(self) -> bool:
        return self.served

    def ensure(self, namespace, name, minimum, owner) -> None:
        self.asked.append((namespace, name, minimum, owner["kind"]))


def _gate_admit(gate, pod_of=lambda pods: pods[3], job=None):
    import json
    from fastapi.testclient import TestClient
    from service_helpers import indexed_job, job_pods
    from webhook_helpers import make_app, operations, post, review_of
    job = job or indexed_job("llama", pods=8, gpus=4)
    app, _ = make_app([job])
    app.state.native_gate = gate
    pod = pod_of(job_pods(job))
    status, body = post(TestClient(app), review_of(pod, "Job", seed=pod["metadata"]["name"]))
    assert status == 200 and body["response"]["allowed"], json.dumps(body)[:400]
    return [op for op in operations(body["response"]) if op["path"] == "/spec/schedulingGroup"]


def test_where_podgroups_are_served_the_webhook_puts_a_gang_member_in_a_native_podgroup():
    gate = FakeGate()
    ops = _gate_admit(gate)
    assert ops == [{"op": "add", "path": "/spec/schedulingGroup", "value": {"podGroupName": "pg-llama-uid-llama"}}]
    assert gate.asked == [("team-a", "pg-llama-uid-llama", 8, "Job")]


def test_no_gate_where_not_served_or_for_a_pod_already_in_a_podgroup():
    assert _gate_admit(FakeGate(served=False)) == []
    gate = FakeGate()

    def in_the_jobs_podgroup(pods):
        pods[0]["spec"]["schedulingGroup"] = {"podGroupName": "train-pgt-0"}
        return pods[0]
    assert _gate_admit(gate, in_the_jobs_podgroup) == [] and gate.asked == []


# --- inside kube-scheduler's native cycle: one domain of the key at a time ------------------------------

def _racks(client) -> dict[str, list[str]]:
    racks: dict[str, list[str]] = {}
    for node in node_names(client):
        racks.setdefault(domain_of(client, node, "rack"), []).append(node)
    return racks


def test_each_offered_domain_gets_a_quick_consistent_answer_and_a_retry_the_same_plan():
    """kube-scheduler (TopologyAwareWorkloadScheduling) calls filter for every member once per rack, with that
    rack's nodes only, members in any order: one rack passes every member (the plan's), the others are
    refused at once saying where the gang is planned; no answer moves the plan, and the retry after a
    thrown-away attempt gets the same nodes."""
    client = make_client(native_podgroup(minimum=4))
    pods = [member(f"w-{i}", gpus=4) for i in range(4)]
    for pod in pods:
        watch(client, pod)
    racks = _racks(client)
    answers = {}
    for attempt in range(2):                                  # the second: a retry after backoff
        for rack, nodes in racks.items():
            for pod in reversed(pods):
                answer = filter_(client, pod, nodes)
                answers.setdefault(attempt, {}).setdefault(rack, []).append(answer)
    for attempt, by_rack in answers.items():
        passing = [rack for rack, found in by_rack.items() if all(a["NodeNames"] for a in found)]
        assert len(passing) == 1, f"attempt {attempt}: racks where every member passes: {passing}"
        for rack, found in by_rack.items():
            if rack != passing[0]:
                assert all(not a["NodeNames"] and "is planned in" in reason(a) for a in found)
                assert all("waiting up to" not in reason(a) for a in found)
    steered = [tuple(a["NodeNames"]) for a in answers[0][passing[0]]]
    assert steered == [tuple(a["NodeNames"]) for a in answers[1][passing[0]]], "the retry gets the same plan"


def test_the_planned_domain_offered_without_a_planned_node_is_replanned_inside_it_at_once():
    client = make_client(native_podgroup(minimum=2))
    pods = [member(f"w-{i}", gpus=2) for i in range(2)]
    for pod in pods:
        watch(client, pod)
    racks = _racks(client)
    first = filter_(client, pods[0], node_names(client))["NodeNames"][0]
    rack = domain_of(client, first, "rack")
    offered = [n for n in racks[rack] if n != first]          # kube-scheduler's own filters dropped that node
    answers = [filter_(client, pod, offered) for pod in pods]
    assert all(len(a["NodeNames"]) == 1 and a["NodeNames"][0] in offered for a in answers), [reason(a) for a in answers if not a["NodeNames"]]


def test_a_workload_annotated_native_gate_off_is_not_gated():
    from service_helpers import indexed_job
    job = indexed_job("llama", pods=8, gpus=4)
    job["metadata"]["annotations"]["tas-extender.io/native-gate"] = "off"
    gate = FakeGate()
    assert _gate_admit(gate, job=job) == [] and gate.asked == []


def test_a_podgroups_own_priority_outranks_its_pods_admitted_one():
    """Defect (end to end, WorkloadAwarePreemption on): a PodGroup with priorityClassName high whose pods name no
    class (admitted with priority 0) was planned at priority 0, as the pod's admitted priority overrode the
    PodGroup's, so it could preempt nothing. kube-scheduler's workload-aware preemption counts the PodGroup's."""
    group = native_podgroup(minimum=2)
    group["spec"]["priorityClassName"], group["spec"]["priority"] = "high", 1000
    client = make_client(group)
    pods = [member(f"w-{i}") for i in range(2)]
    for pod in pods:
        pod["spec"]["priority"] = 0                  # as the API server admits a pod naming no class
        watch(client, pod)
    assert filter_(client, pods[0], node_names(client))["NodeNames"]
    assert service(client).plans.get("team/pg").tree.priority == 1000


def test_a_running_pod_of_a_podgroup_is_a_victim_at_the_podgroups_priority():
    from app.scheduling.preemptor import RunningIndex

    group = native_podgroup(minimum=1)
    group["spec"]["priority"] = 10
    client = make_client(group)
    pod = member("w-0")
    pod["spec"].update(priority=0, nodeName=node_names(client)[0])
    pod["status"]["phase"] = "Running"
    watch(client, pod)
    state = service(client)
    with state.lock:
        entry = RunningIndex(state).pods["team/w-0"]
    assert entry[1] == 10, entry


def test_other_domains_are_refused_from_the_first_answer_without_grouping_or_planning(monkeypatch):
    """kube-scheduler asks for every member in every domain with room (3,136 calls for 128 pods of rack gangs
    on 256 nodes): once a domain was refused for a gang, its other domains get the same answer without the
    gang being grouped and planned again, while nothing changed; any change goes the full way again."""
    from app.scheduling import planning

    client = make_client(native_podgroup(minimum=4))
    pods = [member(f"w-{i}", gpus=4) for i in range(4)]
    for pod in pods:
        watch(client, pod)
    racks = _racks(client)
    first = {(rack, i): filter_(client, pod, nodes) for rack, nodes in racks.items() for i, pod in enumerate(pods)}
    identified = []
    original = planning.identify
    monkeypatch.setattr(planning, "identify", lambda state, pod: identified.append(pod) or original(state, pod))
    again = {(rack, i): filter_(client, pod, nodes) for rack, nodes in racks.items() for i, pod in enumerate(pods)}
    assert again == first
    passing = {rack for (rack, _), answer in again.items() if answer["NodeNames"]}
    assert len(passing) == 1
    assert len(identified) == len(pods), "only the planned domain's calls take the full path"
    service(client).generation += 1                       # something changed: the full path answers again
    other = next(rack for rack in racks if rack not in passing)
    identified.clear()
    assert filter_(client, pods[0], racks[other]) == first[(other, 0)]
    assert len(identified) == 1
