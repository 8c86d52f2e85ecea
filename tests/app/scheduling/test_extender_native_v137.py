"""v1.37 native objects (PodGroup and Workload `v1beta1` and `v1alpha3`, CompositePodGroup `v1alpha3`) through the
extender, and v1.38's preemption candidates with empty victim lists.

The shared v1.36.2 binaries serve only `scheduling.k8s.io/v1alpha2` (checked: `--runtime-config` with
`scheduling.k8s.io/v1beta1=true`, or `api/all=true`, still lists only v1alpha2 PodGroups and Workloads and
no CompositePodGroups), so these run in standalone mode. Every object is first validated, strictly, against
the v1.37 JSON schemas that ship in kubernetes-validate: the tests feed the service only what a v1.37 API
server accepts, with the field names it uses (workloadRef, parentCompositePodGroupName, minGroupCount)."""
from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest

from app.ports import NATIVE_KINDS
from grouper.native import gate_podgroup
from service_helpers import (GPU, bind, domain_of, filter_, indexed_job, job_pods, make_client, node_names, plain_pod,
                             preempt, service, watch)

ZONE, BLOCK, RACK = "topology.kubernetes.io/zone", "network.example.com/block", "network.example.com/rack"
V137 = "1.37.0"


def checked(obj: dict) -> dict:
    kubernetes_validate.validate(obj, V137, strict=True)
    return obj


def constraint(key):
    return {"schedulingConstraints": {"topology": [{"key": key}]}} if key else {}


def workload(name, templates):
    return checked({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload",
                    "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "resourceVersion": "1"},
                    "spec": {"compositePodGroupTemplates": templates}})


def composite_template(name, minimum, key, podgroups=(), composites=()):
    body = {"name": name, "schedulingPolicy": {"gang": {"minGroupCount": minimum}}, **constraint(key)}
    if podgroups:
        body["podGroupTemplates"] = list(podgroups)
    if composites:
        body["compositePodGroupTemplates"] = list(composites)
    return body


def podgroup_template(name, minimum, key):
    return {"name": name, "schedulingPolicy": {"gang": {"minCount": minimum}}, **constraint(key)}


def composite(name, wl, template, minimum, key, parent=None):
    spec = {"workloadRef": {"workloadName": wl, "templateName": template},
            "schedulingPolicy": {"gang": {"minGroupCount": minimum}}, **constraint(key)}
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return checked({"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup",
                    "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "resourceVersion": "1"},
                    "spec": spec})


def podgroup(name, wl, template, minimum, key, parent, priority=None):
    spec = {"workloadRef": {"workloadName": wl, "templateName": template}, "parentCompositePodGroupName": parent,
            "schedulingPolicy": {"gang": {"minCount": minimum}}, **constraint(key)}
    if priority is not None:
        spec["priority"] = priority
    return checked({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                    "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "resourceVersion": "1"},
                    "spec": spec})


def member(name, group, gpus=4):
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "resourceVersion": "1"},
           "spec": {"schedulingGroup": {"podGroupName": group},
                    "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: str(gpus)}}}]},
           "status": {"phase": "Pending"}}
    kubernetes_validate.validate(pod, V137, strict=True)
    return pod


def place(client, pods):
    nodes = {}
    for pod in pods:
        watch(client, pod)
    for pod in pods:
        answer = filter_(client, pod, node_names(client))
        assert len(answer["NodeNames"]) == 1, answer
        assert bind(client, pod, answer["NodeNames"][0]) == ""
        nodes[pod["metadata"]["name"]] = answer["NodeNames"][0]
    return nodes


def test_a_composite_of_v1beta1_podgroups_is_one_gang_each_podgroup_a_segment_in_its_rack():
    wl = workload("train", [composite_template("job", 2, BLOCK, [podgroup_template("seg", 4, RACK)])])
    objects = [wl, composite("job", "train", "job", 2, BLOCK),
               *[podgroup(f"seg-{s}", "train", "seg", 4, RACK, "job", priority=7) for s in range(2)]]
    client = make_client(*objects)
    pods = [member(f"p-{s}-{i}", f"seg-{s}") for s in range(2) for i in range(4)]
    nodes = place(client, pods)
    plans = client.get("/debug/plans").json()["plans"]
    assert [(p["gang"], p["kind"], p["pods"], p["priority"]) for p in plans] == [("team/train", "Workload", 8, 7)]
    assert len({domain_of(client, n, "block") for n in nodes.values()}) == 1
    for s in range(2):
        assert len({domain_of(client, nodes[f"p-{s}-{i}"], "rack") for i in range(4)}) == 1, nodes


def test_nested_composites_keep_each_level_zone_block_rack():
    """v1.37 nests compositePodGroupTemplates: a zone composite of two block composites of two rack PodGroups."""
    halves = [composite_template("half", 2, BLOCK, [podgroup_template("seg", 2, RACK)])]
    wl = workload("big", [composite_template("job", 2, ZONE, composites=halves)])
    objects = [wl, composite("job", "big", "job", 2, ZONE),
               *[composite(f"half-{h}", "big", "half", 2, BLOCK, parent="job") for h in range(2)],
               *[podgroup(f"seg-{h}-{s}", "big", "seg", 2, RACK, f"half-{h}") for h in range(2) for s in range(2)]]
    client = make_client(*objects)
    pods = [member(f"p-{h}-{s}-{i}", f"seg-{h}-{s}", gpus=8) for h in range(2) for s in range(2) for i in range(2)]
    nodes = place(client, pods)
    assert len({domain_of(client, n, "zone") for n in nodes.values()}) == 1
    for h in range(2):
        half = [n for name, n in nodes.items() if name.startswith(f"p-{h}-")]
        assert len({domain_of(client, n, "block") for n in half}) == 1
        for s in range(2):
            assert len({domain_of(client, nodes[f"p-{h}-{s}-{i}"], "rack") for i in range(2)}) == 1


def test_the_gang_waits_for_min_group_count_complete_child_groups():
    wl = workload("train", [composite_template("job", 2, BLOCK, [podgroup_template("seg", 4, RACK)])])
    objects = [wl, composite("job", "train", "job", 2, BLOCK),
               *[podgroup(f"seg-{s}", "train", "seg", 4, RACK, "job") for s in range(2)]]
    client = make_client(*objects)
    first = [member(f"p-0-{i}", "seg-0") for i in range(4)] + [member("p-1-0", "seg-1")]
    for pod in first:
        watch(client, pod)
    answer = filter_(client, first[0], node_names(client))
    assert not answer["NodeNames"] and "waiting for" in next(iter(
        {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}.values()))


@pytest.mark.parametrize("change, field", [
    (lambda o: o["spec"]["schedulingPolicy"]["gang"].pop("minCount"), "minCount"),
    (lambda o: o["spec"].update(workloadRef={"workloadName": "train"}), "templateName"),
])
def test_the_v137_schema_rejects_what_the_fixtures_must_not_be(change, field):
    """The schema check above is real: a PodGroup missing what v1.37 requires does not pass it."""
    obj = podgroup("seg-0", "train", "seg", 4, RACK, "job")
    change(obj)
    with pytest.raises(kubernetes_validate.ValidationError) as err:
        kubernetes_validate.validate(obj, V137, strict=True)
    assert field in str(err.value)


# ---- v1.37: scheduling.k8s.io/v1alpha2 is gone; v1alpha3 always, v1beta1 only with GenericWorkload (beta, off)
def _v137_versions(kind: str) -> set[str]:
    """The scheduling.k8s.io versions of `kind` that v1.37's schemas (kubernetes-validate) define."""
    schemas = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{V137}-local-strict"
    return {path.stem.rsplit("-", 1)[1] for path in schemas.glob(f"{kind.lower()}-scheduling-*.json")}


@pytest.mark.parametrize("kind", ["PodGroup", "Workload", "CompositePodGroup"])
def test_every_version_v137_defines_of_a_native_kind_is_watched_v1beta1_first(kind):
    """A v1.37 API server with GenericWorkload off serves PodGroups and Workloads as v1alpha3 only: without
    v1alpha3 in the watch list the service would see no native gang at all there."""
    watched = [k.version for k in NATIVE_KINDS if k.kind == kind and k.group == "scheduling.k8s.io"]
    assert _v137_versions(kind) and _v137_versions(kind) <= set(watched)
    assert watched[0] == "v1beta1" or "v1beta1" not in watched


def v1alpha3(obj: dict) -> dict:
    return checked({**obj, "apiVersion": "scheduling.k8s.io/v1alpha3"})


def test_v1alpha3_podgroups_and_their_disruption_mode_struct_are_gangs_as_v1beta1_ones():
    """v1alpha3 names its Workload as v1beta1 does (workloadRef); DisruptionMode is a struct now (`single` or
    `all`), which the grouping does not read and must not trip over."""
    wl = workload("train", [composite_template("job", 2, BLOCK, [podgroup_template("seg", 4, RACK)])])
    groups = []
    for s in range(2):
        group = podgroup(f"seg-{s}", "train", "seg", 4, RACK, "job")
        group["spec"]["disruptionMode"] = {"all": {}}
        groups.append(v1alpha3(group))
    wl["spec"]["compositePodGroupTemplates"][0]["disruptionMode"] = {"single": {}}
    client = make_client(v1alpha3(wl), composite("job", "train", "job", 2, BLOCK), *groups)
    nodes = place(client, [member(f"p-{s}-{i}", f"seg-{s}") for s in range(2) for i in range(4)])
    plans = client.get("/debug/plans").json()["plans"]
    assert [(p["gang"], p["pods"]) for p in plans] == [("team/train", 8)]
    assert len({domain_of(client, n, "block") for n in nodes.values()}) == 1


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha3"])
def test_the_native_gates_podgroup_is_a_valid_v137_object(version):
    owner = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "uid": "uid-train"}}
    checked(gate_podgroup("pg-train-uid-train", "team", 16, owner, version))


# ---- v1.38: preemption-capable extenders get candidates with empty victim lists (kubernetes#135486): nodes
# where kube-scheduler's own plugins fit the pod without evicting anything, i.e. nodes our filter refused
def test_a_plain_pod_is_not_nominated_to_a_node_we_refused_with_nothing_to_evict():
    """Kept, such a candidate would nominate the pod to a node reserved for a gang with no victim: the pod is
    refused there again, and its nomination holds the node against the gang's own pods meanwhile."""
    job = indexed_job("llama", pods=8, gpus=8, required="zone", segment=None)
    client = make_client(job)
    filter_(client, job_pods(job)[0])
    state = service(client)
    reserved = sorted({state.cluster.node_names[u.node] for u in state.cluster.reservations.values()})
    pod = plain_pod("greedy", gpus=8)
    watch(client, pod)
    refused = filter_(client, pod)["FailedNodes"]
    assert reserved[0] in refused
    assert preempt(client, pod, {reserved[0]: [], reserved[1]: ["uid-someone"]}) == {reserved[1]: ["uid-someone"]}


def test_a_gang_pod_keeps_an_empty_candidate_only_on_its_own_planned_node():
    job = indexed_job("llama", pods=8, gpus=8, required="zone", segment=None)
    client = make_client(job)
    pods = job_pods(job)
    for pod in pods:
        watch(client, pod)
    planned = filter_(client, pods[0])["NodeNames"]
    assert len(planned) == 1
    other = next(n for n in node_names(client) if n != planned[0])
    assert preempt(client, pods[0], {planned[0]: [], other: []}) == {planned[0]: []}
