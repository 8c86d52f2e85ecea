"""Loading Kubernetes objects: `kind: List`, `*List` kinds, multi-document YAML, JSON, and errors."""
import json

import pytest

from topology.objects import ClusterObjects, ObjectsError, is_topology, parse_objects

# What `kubectl get nodes,pods,topologies -A -o yaml` prints: one List holding every kind.
KUBECTL_LIST = """
apiVersion: v1
kind: List
metadata:
  resourceVersion: ""
items:
- apiVersion: v1
  kind: Node
  metadata:
    name: node-a
    labels: {kubernetes.io/hostname: node-a}
  status:
    allocatable: {cpu: "8", memory: 32Gi, pods: "110"}
- apiVersion: v1
  kind: Pod
  metadata: {name: web-0, namespace: shop}
  spec:
    nodeName: node-a
    containers: [{name: app, resources: {requests: {cpu: 500m}}}]
  status: {phase: Running}
- apiVersion: kai.scheduler/v1alpha1
  kind: Topology
  metadata: {name: default}
  spec:
    levels: [{nodeLabel: kubernetes.io/hostname}]
"""


def test_kubectl_list_is_flattened_and_sorted_by_kind():
    objects = ClusterObjects.from_text(KUBECTL_LIST)
    assert [n["metadata"]["name"] for n in objects.nodes] == ["node-a"]
    assert [p["metadata"]["name"] for p in objects.pods] == ["web-0"]
    assert [t["metadata"]["name"] for t in objects.topologies] == ["default"]
    assert objects.other == []


def test_typed_lists_and_nested_lists_are_flattened():
    text = json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": [
        {"kind": "Node", "metadata": {"name": "a"}},
        {"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "b"}}]},
    ]})
    assert [o["metadata"]["name"] for o in parse_objects(text)] == ["a", "b"]


def test_multi_document_yaml_skips_empty_documents():
    text = "---\nkind: Node\nmetadata: {name: a}\n---\n---\nkind: PodList\nitems:\n- kind: Pod\n  metadata: {name: p}\n"
    assert [(o["kind"], o["metadata"]["name"]) for o in parse_objects(text)] == [("Node", "a"), ("Pod", "p")]


def test_json_object_and_json_array():
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a"}}
    assert parse_objects(json.dumps(node)) == [node]
    assert parse_objects("  " + json.dumps([node, node])) == [node, node]


def test_yaml_flow_style_is_yaml_not_broken_json():
    # "{kind: Node, ...}" starts like JSON but is YAML (kubectl and hand-written files use flow style)
    assert parse_objects("{kind: Node, apiVersion: v1, metadata: {name: a}}") == \
        [{"kind": "Node", "apiVersion": "v1", "metadata": {"name": "a"}}]
    assert parse_objects("[{kind: Pod, metadata: {name: p}}]") == [{"kind": "Pod", "metadata": {"name": "p"}}]


def test_empty_text_has_no_objects():
    assert parse_objects("") == []
    assert parse_objects("---\n") == []


@pytest.mark.parametrize("text, message", [
    ("kind: [unclosed", "not valid YAML or JSON"),
    ('{"kind": "Node",', "not valid YAML or JSON"),
    ("just a string", "expected a Kubernetes object"),
    ("- 1\n- 2\n", "expected a Kubernetes object"),
    ("metadata: {name: a}\n", "without 'kind'"),
    ("kind: List\nitems:\n- metadata: {name: x}\n", "without 'kind'"),
])
def test_errors_say_what_is_wrong(text, message):
    with pytest.raises(ObjectsError, match=message):
        parse_objects(text)


@pytest.mark.parametrize("api_version, kind, expected", [
    ("kai.scheduler/v1alpha1", "Topology", True),
    ("kueue.x-k8s.io/v1beta1", "Topology", True),
    ("kueue.x-k8s.io/v1beta2", "Topology", True),
    ("topology.volcano.sh/v1alpha1", "HyperNode", True),
    ("example.com/v1", "Topology", False),
    ("kueue.x-k8s.io/v1beta1", "ResourceFlavor", False),
    ("v1", "Topology", False),
])
def test_topology_kinds(api_version, kind, expected):
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "t"}}
    assert is_topology(obj) is expected
    sorted_objects = ClusterObjects.from_objects([obj])
    assert (sorted_objects.topologies == [obj]) is expected
    assert (sorted_objects.other == [obj]) is not expected


def test_yaml_is_parsed_with_libyaml_when_present():
    import yaml

    import topology.objects as objects

    expected = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
    assert objects.YAML_LOADER is expected


def test_yaml_loader_stays_safe():
    with pytest.raises(ObjectsError, match="not valid YAML"):
        parse_objects("kind: Pod\nspec: !!python/object/apply:os.system ['true']\n")
