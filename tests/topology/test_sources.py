"""KAI / Kueue Topology objects and Volcano HyperNodes become trees over one node list."""
import pytest

from topology.cluster import Cluster
from topology.nodes import NodeInfo
from topology.sources import (VOLCANO_TOPOLOGY_NAME, TopologyError, build_trees, label_levels,
                              tree_from_hypernodes, tree_from_labels)
from topology.tree import LevelError

ZONE, BLOCK, RACK, HOST = "topology.kubernetes.io/zone", "example.com/block", "example.com/rack", "kubernetes.io/hostname"


def node(name, zone=None, block=None, rack=None, **extra):
    labels = {k: v for k, v in ((ZONE, zone), (BLOCK, block), (RACK, rack)) if v is not None}
    return NodeInfo(name, {**labels, **extra}, {"cpu": 1000, "pods": 110})


NODES = [
    node("n1", "z1", "b1", "rack-1"), node("n2", "z1", "b1", "rack-1"), node("n3", "z1", "b2", "rack-1"),
    node("n4", "z2", "b1", "rack-1"), node("n5", "z2", None, "rack-1"),       # n5 lacks the block label
]


def kai(name, *levels):
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [dict(nodeLabel=label, **({"alias": alias} if alias else {}))
                                for label, alias in levels]}}


def kueue(name, version, *labels):
    return {"apiVersion": f"kueue.x-k8s.io/{version}", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": label} for label in labels]}}


def test_kai_topology_with_aliases():
    t = tree_from_labels(kai("default", (ZONE, "zone"), (BLOCK, "block"), (RACK, "rack")), NODES)
    assert t.name == "default" and t.source == "kai.scheduler/v1alpha1/Topology"
    assert [level.display for level in t.levels] == ["zone", "block", "rack"]
    assert t.level_index("block") == t.level_index(BLOCK) == 1
    assert t.domain_ids[2] == ["z1/b1/rack-1", "z1/b2/rack-1", "z2/b1/rack-1"]   # one rack value, three racks


def test_nodes_lacking_a_level_label_are_left_out_and_counted():
    t = tree_from_labels(kai("default", (ZONE, None), (BLOCK, None), (RACK, None)), NODES)
    assert t.member.tolist() == [True, True, True, True, False]
    assert t.excluded == {"n5": f"missing level label {BLOCK}"}
    zones_only = tree_from_labels(kai("zones", (ZONE, None)), NODES)
    assert zones_only.excluded == {} and zones_only.member.all()


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_kueue_topology(version):
    t = tree_from_labels(kueue("kueue", version, BLOCK, RACK, HOST), NODES)
    assert t.source == f"kueue.x-k8s.io/{version}/Topology"
    assert t.level_names() == [BLOCK, RACK, HOST]
    assert t.level_index(HOST) == 2
    # the hostname label defaults to the node name when a node does not carry it
    assert t.domain_ids[2][0] == "b1/rack-1/n1"
    assert t.domain_count(0) == 2          # b1, b2 (n5 has no block)
    with pytest.raises(LevelError, match=f"unknown level 'rack'.*valid levels: {BLOCK}, {RACK}, {HOST}"):
        t.level_index("rack")


@pytest.mark.parametrize("spec, message", [
    ({}, "spec.levels must list at least one level"),
    ({"levels": []}, "spec.levels must list at least one level"),
    ({"levels": [{"nodeLabel": ZONE}, {"alias": "rack"}]}, r"spec.levels\[1\].nodeLabel is required"),
    ({"levels": [{"nodeLabel": ZONE}, {"nodeLabel": ZONE}]}, "repeat a nodeLabel"),
])
def test_invalid_topologies(spec, message):
    with pytest.raises(TopologyError, match=message):
        label_levels({"kind": "Topology", "metadata": {"name": "bad"}, "spec": spec})


def test_several_topologies_side_by_side_and_errors_by_name():
    objects = [kai("default", (ZONE, "zone"), (RACK, "rack")), kueue("kueue", "v1beta2", BLOCK, RACK),
               kueue("broken", "v1beta1"), kueue("default", "v1beta1", ZONE)]
    trees = build_trees(objects, NODES)
    errors = trees.errors
    assert sorted(trees) == ["default", "kueue"]
    assert trees["default"].source.startswith("kai.scheduler")
    assert "spec.levels must list" in errors["broken"]
    assert "defined more than once" in errors["default"]
    cluster = Cluster(NODES, objects)
    assert cluster.topology("kueue") is cluster.topologies["kueue"]
    with pytest.raises(KeyError, match="topology 'broken' is invalid"):
        cluster.topology("broken")
    with pytest.raises(KeyError, match="unknown topology 'nope'; valid topologies: default, kueue"):
        cluster.topology("nope")


# --- Volcano HyperNodes -------------------------------------------------------------------------

def hypernode(name, tier, members, tier_name=None):
    spec = {"tier": tier, "members": members}
    if tier_name:
        spec["tierName"] = tier_name
    return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": name},
            "spec": spec}


def nodes_exact(*names):
    return [{"type": "Node", "selector": {"exactMatch": {"name": n}}} for n in names]


def children(*names):
    return [{"type": "HyperNode", "selector": {"exactMatch": {"name": n}}} for n in names]


GPU_NODES = [NodeInfo(f"gpu-{i}", {"rack": f"r{i // 2}", "pool": "gpu"}, {"cpu": 1000}) for i in range(6)] + \
    [NodeInfo("cpu-0", {"pool": "cpu"}, {"cpu": 1000})]


def volcano_objects():
    return [
        hypernode("s0", 1, nodes_exact("gpu-0", "gpu-1"), "leaf"),
        hypernode("s1", 1, [{"type": "Node", "selector": {"regexMatch": {"pattern": "^gpu-[23]$"}}}], "leaf"),
        hypernode("s2", 1, [{"type": "Node", "selector": {"labelMatch": {"matchLabels": {"rack": "r2"}}}}], "leaf"),
        hypernode("spine-a", 2, children("s0", "s1"), "spine"),
        hypernode("spine-b", 2, children("s2"), "spine"),
        hypernode("core", 3, children("spine-a", "spine-b"), "core"),
    ]


def test_hypernodes_form_a_tree_with_tiers_as_levels():
    t = tree_from_hypernodes(volcano_objects(), GPU_NODES)
    assert t.name == VOLCANO_TOPOLOGY_NAME and t.source == "topology.volcano.sh/v1alpha1/HyperNode"
    assert [level.key for level in t.levels] == ["tier-3", "tier-2", "tier-1"]
    assert [t.node_path(i) for i in range(6)] == [
        ["core", "spine-a", "s0"], ["core", "spine-a", "s0"], ["core", "spine-a", "s1"],
        ["core", "spine-a", "s1"], ["core", "spine-b", "s2"], ["core", "spine-b", "s2"]]
    assert t.excluded == {"cpu-0": "in no HyperNode"}


def test_hypernode_levels_by_tier_and_tier_name():
    t = tree_from_hypernodes(volcano_objects(), GPU_NODES)
    assert t.level_index("tier-1") == t.level_index("leaf") == 2
    assert t.level_index("spine") == 1 and t.level_index("core") == 0
    with pytest.raises(LevelError, match="valid levels: tier-3, core, tier-2, spine, tier-1, leaf"):
        t.level_index("rack")


def test_label_match_expressions_select_nodes():
    selector = {"labelMatch": {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r0", "r1"]}]}}
    t = tree_from_hypernodes([hypernode("s", 1, [{"type": "Node", "selector": selector}])], GPU_NODES)
    assert t.member.tolist() == [True] * 4 + [False] * 3


def test_tier_name_is_an_alias_only_when_the_tier_agrees_on_it():
    objects = [hypernode("s0", 1, nodes_exact("gpu-0"), "leaf"), hypernode("s1", 1, nodes_exact("gpu-1"), "tor")]
    t = tree_from_hypernodes(objects, GPU_NODES)
    assert t.levels[0].alias is None and t.level_names() == ["tier-1"]


def test_a_skipped_tier_repeats_the_hypernode_above():
    objects = [hypernode("s0", 1, nodes_exact("gpu-0")),
               hypernode("spine", 2, children("s0")),
               hypernode("core", 3, children("spine", "s1")),
               hypernode("s1", 1, nodes_exact("gpu-1"))]          # s1 hangs from the core directly
    t = tree_from_hypernodes(objects, GPU_NODES)
    assert t.node_path(0) == ["core", "spine", "s0"]
    assert t.node_path(1) == ["core", "core", "s1"]
    assert t.domain_ids[1] == ["core/core", "core/spine"]
    assert t.ancestor(2, int(t.node_domain[2][1]), 0) == t.ancestor(2, int(t.node_domain[2][0]), 0)


def test_a_node_directly_under_a_high_tier():
    objects = [hypernode("s0", 1, nodes_exact("gpu-0")), hypernode("spine", 2, children("s0") + nodes_exact("gpu-1"))]
    t = tree_from_hypernodes(objects, GPU_NODES)
    assert t.node_path(1) == ["spine", "spine"]
    assert t.node_path(0) == ["spine", "s0"]


def test_a_node_in_two_hypernodes_of_one_tier_joins_the_first_by_name():
    objects = [hypernode("b", 1, nodes_exact("gpu-0")), hypernode("a", 1, nodes_exact("gpu-0"))]
    assert tree_from_hypernodes(objects, GPU_NODES).node_path(0) == ["a"]


@pytest.mark.parametrize("tier", [0, "x", None, -1])
def test_a_bad_tier_is_an_error(tier):
    with pytest.raises(TopologyError, match="HyperNode 's0': spec.tier must be an integer >= 1"):
        tree_from_hypernodes([hypernode("s0", tier, nodes_exact("gpu-0"))], GPU_NODES)
    trees = build_trees([hypernode("s0", tier, nodes_exact("gpu-0"))], GPU_NODES)
    errors = trees.errors
    assert trees == {} and "spec.tier" in errors[VOLCANO_TOPOLOGY_NAME]


def test_hypernodes_beside_label_topologies():
    trees = build_trees(volcano_objects() + [kai("default", ("pool", "pool"), ("rack", "rack"))], GPU_NODES)
    errors = trees.errors
    assert errors == {}
    assert sorted(trees) == ["default", VOLCANO_TOPOLOGY_NAME]
    assert trees["default"].excluded == {"cpu-0": "missing level label rack"}


def test_the_first_missing_label_is_the_reason():
    nodes = [node("bare"), node("rackonly", rack="r1"), node("full", "z1", "b1", "r1")]
    t = tree_from_labels(kai("default", (ZONE, None), (BLOCK, None), (RACK, None)), nodes)
    assert t.excluded == {"bare": f"missing level label {ZONE}", "rackonly": f"missing level label {ZONE}"}
    assert t.member.tolist() == [False, False, True]
    racks = tree_from_labels(kai("racks", (RACK, None), (BLOCK, None)), nodes)
    assert racks.excluded == {"bare": f"missing level label {RACK}", "rackonly": f"missing level label {BLOCK}"}


@pytest.mark.parametrize("levels", [["zone"], [None], [{"nodeLabel": ["a"]}], {"nodeLabel": ZONE}])
def test_malformed_levels_are_topology_errors(levels):
    obj = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "bad"},
           "spec": {"levels": levels}}
    with pytest.raises(TopologyError, match="Topology 'bad': spec.levels"):
        label_levels(obj)
    trees = build_trees([obj], NODES)
    errors = trees.errors
    assert trees == {} and "spec.levels" in errors["bad"]


def test_a_topology_without_a_name_is_an_error_not_a_key_error():
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "spec": {"levels": [{"nodeLabel": ZONE}]}}
    with pytest.raises(TopologyError, match="Topology without metadata.name"):
        tree_from_labels(obj, NODES)
    nameless = {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
                "spec": {"tier": 1, "members": nodes_exact("gpu-0")}}
    trees = build_trees([nameless], GPU_NODES)
    errors = trees.errors
    assert trees == {} and "HyperNode without metadata.name" in errors[VOLCANO_TOPOLOGY_NAME]


def test_an_invalid_regex_member_is_an_error_naming_the_field():
    bad = hypernode("s0", 1, [{"type": "Node", "selector": {"regexMatch": {"pattern": "gpu-[0"}}}])
    with pytest.raises(TopologyError, match=r"HyperNode 's0': spec.members\[0\].selector.regexMatch.pattern"):
        tree_from_hypernodes([bad], GPU_NODES)
    trees = build_trees([bad], GPU_NODES)          # a cluster sync must not crash on it
    errors = trees.errors
    assert trees == {} and "regexMatch" in errors[VOLCANO_TOPOLOGY_NAME]


@pytest.mark.parametrize("member", [{"type": "Hypernode", "selector": {"exactMatch": {"name": "s1"}}},
                                    {"selector": {"exactMatch": {"name": "gpu-0"}}}, "gpu-0"])
def test_a_member_of_unknown_type_is_an_error_listing_the_types(member):
    objects = [hypernode("s0", 2, [member]), hypernode("s1", 1, nodes_exact("gpu-0"))]
    with pytest.raises(TopologyError, match=r"spec.members\[0\].type=.* is invalid; valid: Node, HyperNode"):
        tree_from_hypernodes(objects, GPU_NODES)


def test_label_match_selects_no_hypernode():
    # Volcano: labelMatch takes effect only for members of type Node; an empty one must not adopt
    # every other HyperNode as a child
    objects = [hypernode("s0", 1, nodes_exact("gpu-0")), hypernode("s1", 1, nodes_exact("gpu-1")),
               hypernode("top", 2, [{"type": "HyperNode", "selector": {"labelMatch": {}}}] + children("s0"))]
    t = tree_from_hypernodes(objects, GPU_NODES)
    assert t.node_path(0) == ["top", "s0"]
    assert t.node_path(1) == ["s1", "s1"]          # s1 has no parent: its tier-2 place repeats it
