"""A gang that cannot fit leaves kube-scheduler's queue (issue 39, app/scheduling/unfit_gate.py): the webhook
gates its pods at creation only when the gang is known not to fit, and the service lifts every member's
gate at once when it fits, or after --gate-unfit-bound seconds whatever the check says."""
from __future__ import annotations

import base64
import copy
import json

import jsonpatch

from app.state import POD_KIND
from app.state.service import kind_of
from grouper.names import FITS_GATE
from service_helpers import Clock, engine, indexed_job, job_pods, make_client, node_names, service
from webhook_helpers import post, review_of

NODES = 32                                                 # the demo cluster: 32 nodes of 8 GPUs


def admitted(client, pod: dict) -> dict:
    """The pod as the API server creates it after our webhook's patch."""
    status, body = post(client, review_of(pod))
    assert status == 200 and body["response"]["allowed"], body
    operations = body["response"].get("patch")
    created = copy.deepcopy(pod)
    created["spec"]["schedulerName"] = "default-scheduler"     # the API server's default, before the patch
    return jsonpatch.apply_patch(created, json.loads(base64.b64decode(operations))) if operations else created


def gates(pod: dict) -> list[str]:
    return [gate["name"] for gate in pod["spec"].get("schedulingGates") or ()]


def fill_every_node(client) -> list[dict]:
    """A running plain pod of 8 GPUs on each node: no gang fits now, any fits on the empty cluster."""
    state = service(client)
    fillers = []
    for i, node in enumerate(node_names(client)):
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"filler-{i}", "namespace": "default", "uid": f"uid-filler-{i}"},
               "spec": {"nodeName": node, "schedulerName": "other", "containers": [{
                   "name": "main", "image": "app", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
               "status": {"phase": "Running"}}
        state.apply(POD_KIND, "ADDED", pod)
        fillers.append(pod)
    return fillers


def test_a_gang_that_never_fits_is_gated_and_one_that_fits_is_not():
    huge = indexed_job("huge", pods=4 * NODES, gpus=8)
    small = indexed_job("small", pods=4, gpus=1)
    client = make_client(huge, small, gate_unfit_gangs=True, set_scheduler_name=True)
    assert gates(admitted(client, job_pods(huge)[0])) == [FITS_GATE]
    assert gates(admitted(client, job_pods(huge)[1])) == [FITS_GATE]      # answered from the kept refusal
    assert gates(admitted(client, job_pods(small)[0])) == []
    assert service(client).plans.get("team-a/huge") is None               # a read: nothing planned or stored


def test_no_gate_when_the_setting_is_off():
    huge = indexed_job("huge", pods=4 * NODES, gpus=8)
    client = make_client(huge, set_scheduler_name=True, gate_unfit_gangs=False)
    assert gates(admitted(client, job_pods(huge)[0])) == []


def test_a_gang_eviction_could_help_is_not_gated_while_preemption_is_on():
    gang = indexed_job("gang", pods=4, gpus=8, segment=None)
    client = make_client(gang, gate_unfit_gangs=True, set_scheduler_name=True)
    fill_every_node(client)
    assert gates(admitted(client, job_pods(gang)[0])) == []
    off = make_client(gang, gate_unfit_gangs=True, set_scheduler_name=True, preemption="off")
    fill_every_node(off)
    assert gates(admitted(off, job_pods(gang)[0])) == [FITS_GATE]


def test_every_member_is_ungated_at_once_when_room_frees():
    gang = indexed_job("gang", pods=4, gpus=8, segment=None)
    client = make_client(gang, gate_unfit_gangs=True, set_scheduler_name=True, preemption="off")
    state, unfit = service(client), engine(client).unfit
    fillers = fill_every_node(client)
    members = [admitted(client, pod) for pod in job_pods(gang)]
    assert all(gates(pod) == [FITS_GATE] for pod in members)
    for pod in members:
        state.apply(POD_KIND, "ADDED", pod)
    assert unfit.release_due() == 0                            # nothing freed: still gated, not re-planned
    assert all(gates(state.find_pod("team-a", p["metadata"]["name"])) == [FITS_GATE] for p in members)
    for pod in fillers:
        state.apply(POD_KIND, "DELETED", pod)
    assert unfit.release_due() == 4
    assert all(gates(state.find_pod("team-a", p["metadata"]["name"])) == [] for p in members)
    assert unfit.gated() == {}


def test_a_gate_is_lifted_after_the_bound_even_when_the_gang_still_cannot_fit():
    clock = Clock()
    huge = indexed_job("huge", pods=4 * NODES, gpus=8)
    client = make_client(huge, clock=clock, gate_unfit_gangs=True, set_scheduler_name=True, gate_unfit_bound=60)
    state, unfit = service(client), engine(client).unfit
    pod = admitted(client, job_pods(huge)[0])
    state.apply(POD_KIND, "ADDED", pod)
    clock.now += 59
    assert unfit.release_due() == 0
    clock.now += 1
    assert unfit.release_due() == 1
    assert gates(state.find_pod("team-a", pod["metadata"]["name"])) == []


def test_gated_pods_found_on_start_are_checked_and_lifted():
    """A restart forgets what the webhook gated: the sweep of the watched pods finds them."""
    gang = indexed_job("gang", pods=4, gpus=1, segment=None)
    client = make_client(gang, gate_unfit_gangs=True, set_scheduler_name=True)
    state = service(client)
    for pod in job_pods(gang):
        pod["spec"]["schedulingGates"] = [{"name": "someone-else/gate"}, {"name": FITS_GATE}]
        state.apply(POD_KIND, "ADDED", pod)
    assert engine(client).unfit.release_due() == 4                # it fits: every gate of ours lifted
    assert [gates(state.find_pod("team-a", p["metadata"]["name"])) for p in job_pods(gang)] == \
        [["someone-else/gate"]] * 4


def test_only_pods_of_our_schedulers_are_ungated():
    gang = indexed_job("gang", pods=1, gpus=1, segment=None)
    client = make_client(gang, gate_unfit_gangs=True, set_scheduler_name=True)
    state = service(client)
    pod = job_pods(gang)[0]
    pod["spec"].update(schedulerName="someone-else", schedulingGates=[{"name": FITS_GATE}])
    state.apply(POD_KIND, "ADDED", pod)
    assert engine(client).unfit.release_due() == 0
    assert gates(state.find_pod("team-a", pod["metadata"]["name"])) == [FITS_GATE]


def test_a_gang_that_fits_is_planned_once_at_admission_not_once_per_member(monkeypatch):
    from app.scheduling import planning
    small = indexed_job("small", pods=8, gpus=1)
    client = make_client(small, gate_unfit_gangs=True, set_scheduler_name=True)
    calls = []
    original = planning.plan
    monkeypatch.setattr(planning, "plan", lambda *a, **k: calls.append(1) or original(*a, **k))
    assert [gates(admitted(client, pod)) for pod in job_pods(small)] == [[]] * 8
    assert len(calls) == 1


def test_a_podgroup_member_is_never_gated():
    """The webhook's grouping of a PodGroup sees only the pod at hand, not the gang: it cannot know."""
    podgroup = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                "metadata": {"name": "huge", "namespace": "team-a", "uid": "uid-pg", "resourceVersion": "1"},
                "spec": {"minMember": 4 * NODES, "topologyConstraint": {
                    "topology": "default", "requiredTopologyLevel": "block"}}}
    client = make_client(podgroup, gate_unfit_gangs=True, set_scheduler_name=True)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "huge-0", "namespace": "team-a", "annotations": {"pod-group-name": "huge"}},
           "spec": {"schedulerName": "tas-scheduler", "containers": [{
               "name": "main", "image": "app", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    status, body = post(client, review_of(pod, owner_kind="PodGroup"))
    assert status == 200 and body["response"]["allowed"]
    assert "schedulingGates" not in base64.b64decode(body["response"].get("patch") or b"").decode()


def test_a_job_recreated_under_the_same_name_is_checked_again_not_answered_from_its_predecessor():
    """A gang remembered as fitting is the Job that fitted (its uid), not its name: a Job deleted and made again
    while the cluster is full is gated like any other gang that cannot fit."""
    gang = indexed_job("gang", pods=4, gpus=8, segment=None)
    client = make_client(gang, gate_unfit_gangs=True, set_scheduler_name=True, preemption="off")
    state = service(client)
    assert gates(admitted(client, job_pods(gang)[0])) == []              # the empty cluster: it fits
    state.apply(kind_of(gang), "DELETED", gang)
    again = copy.deepcopy(gang)
    again["metadata"].update(uid="uid-gang-again", resourceVersion="2")
    state.apply(kind_of(again), "ADDED", again)
    fill_every_node(client)
    assert gates(admitted(client, job_pods(again)[0])) == [FITS_GATE]
