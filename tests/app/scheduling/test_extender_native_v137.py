"""v1.37 native objects (PodGroup and Workload `v1beta1`, CompositePodGroup `v1alpha3`) through the extender.

The shared v1.36.2 binaries serve only `scheduling.k8s.io/v1alpha2` (checked: `--runtime-config` with
`scheduling.k8s.io/v1beta1=true`, or `api/all=true`, still lists only v1alpha2 PodGroups and Workloads and
no CompositePodGroups), so these run in standalone mode. Every object is first validated, strictly, against
the v1.37 JSON schemas that ship in kubernetes-validate: the tests feed the service only what a v1.37 API
server accepts, with the field names it uses (workloadRef, parentCompositePodGroupName, minGroupCount)."""
from __future__ import annotations

import kubernetes_validate
import pytest

from service_helpers import GPU, bind, domain_of, filter_, make_client, node_names, watch

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
