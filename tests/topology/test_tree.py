"""TopologyTree: levels coarsest first, domain ids as paths, level names, and the structure arrays."""
import numpy as np
import pytest

from topology.tree import Level, LevelError, TopologyTree

LEVELS = [Level("topology.kubernetes.io/zone", "zone"), Level("example.com/block", "block"),
          Level("example.com/rack", "rack")]


def tree(paths, levels=LEVELS, excluded=None):
    names = [f"n{i}" for i in range(len(paths))]
    return TopologyTree("t", "test", levels, names, paths, excluded)


PATHS = [
    ("z1", "b1", "rack-1"), ("z1", "b1", "rack-1"), ("z1", "b1", "rack-2"),
    ("z1", "b2", "rack-1"),                        # same rack value under another block
    ("z2", "b1", "rack-10"), ("z2", "b1", "rack-2"),
    None,                                          # not a member
]


def test_domain_ids_are_paths():
    t = tree(PATHS)
    assert t.domain_ids[0] == ["z1", "z2"]
    assert t.domain_ids[1] == ["z1/b1", "z1/b2", "z2/b1"]
    assert t.domain_ids[2] == ["z1/b1/rack-1", "z1/b1/rack-2", "z1/b2/rack-1", "z2/b1/rack-2", "z2/b1/rack-10"]
    assert t.domain_count(2) == 5                  # rack-1 under two blocks is two domains
    assert t.domain_index[2]["z1/b2/rack-1"] == 2
    assert t.domain_value(2, 2) == "rack-1"


def test_node_domain_and_parent_arrays():
    t = tree(PATHS)
    assert t.member.tolist() == [True] * 6 + [False]
    assert t.node_domain[0].tolist() == [0, 0, 0, 0, 1, 1, -1]
    assert t.node_domain[1].tolist() == [0, 0, 0, 1, 2, 2, -1]
    assert t.node_domain[2].tolist() == [0, 0, 1, 2, 4, 3, -1]
    assert t.parent[0].tolist() == [-1, -1]
    assert t.parent[1].tolist() == [0, 0, 1]
    assert t.parent[2].tolist() == [0, 0, 1, 2, 2]
    for level in range(3):
        assert t.node_domain[level].dtype == np.int32 and t.parent[level].dtype == np.int32


def test_domains_are_ordered_by_parent_then_natural_value():
    t = tree([("b", "x"), ("a", "rack-10"), ("a", "rack-9"), ("a-b", "y")], LEVELS[:2])
    assert t.domain_ids[0] == ["a", "a-b", "b"]
    assert t.domain_ids[1] == ["a/rack-9", "a/rack-10", "a-b/y", "b/x"]
    assert t.parent[1].tolist() == [0, 0, 1, 2]    # children of one parent sit together


def test_node_path_ancestor_children_and_nodes_in():
    t = tree(PATHS)
    assert t.node_path(3) == ["z1", "b2", "rack-1"]
    assert t.node_path(6) is None
    assert t.ancestor(2, 3, 0) == 1 and t.ancestor(2, 3, 1) == 2 and t.ancestor(2, 3, 2) == 3
    assert t.children_of(0, 0).tolist() == [0, 1]          # blocks of z1
    assert t.children_of(1, 0).tolist() == [0, 1]          # racks of z1/b1
    assert t.children_of(2, 0).tolist() == [0, 1]          # nodes of z1/b1/rack-1
    assert t.nodes_in(0, 1).tolist() == [4, 5]
    assert t.nodes_in(1, 1).tolist() == [3]


def test_level_by_label_or_alias():
    t = tree(PATHS)
    assert t.depth == 3
    assert t.level_index("topology.kubernetes.io/zone") == 0 and t.level_index("zone") == 0
    assert t.level_index("example.com/rack") == 2 and t.level_index("rack") == 2
    assert t.level_names() == ["topology.kubernetes.io/zone", "zone", "example.com/block", "block",
                               "example.com/rack", "rack"]
    assert [level.display for level in t.levels] == ["zone", "block", "rack"]


def test_unknown_level_lists_the_valid_names():
    with pytest.raises(LevelError) as err:
        tree(PATHS).level_index("host")
    message = str(err.value)
    assert "unknown level 'host'" in message and "'t'" in message
    assert "topology.kubernetes.io/zone, zone, example.com/block, block, example.com/rack, rack" in message


def test_ambiguous_level_is_an_error():
    levels = [Level("example.com/block", "rack"), Level("rack")]        # an alias equal to another label
    t = tree([("b1", "r1")], levels)
    with pytest.raises(LevelError, match="ambiguous level 'rack'.*valid levels: example.com/block, rack, rack"):
        t.level_index("rack")
    assert t.level_index("example.com/block") == 0


def test_a_tree_needs_levels():
    with pytest.raises(LevelError, match="no levels"):
        tree([("a",)], [])


def test_a_tree_without_members():
    t = tree([None, None], excluded={"n0": "missing level label zone", "n1": "missing level label zone"})
    assert [t.domain_count(level) for level in range(3)] == [0, 0, 0]
    assert t.node_domain[2].tolist() == [-1, -1]
    assert len(t.excluded) == 2


def test_natural_order_of_values_is_deterministic():
    values = ["rack-10", "rack-9", "rack-1", "rack-01", "rack-1a", "rack", "rack-002"]
    t = tree([(v,) for v in values], LEVELS[:1])
    assert t.domain_ids[0] == ["rack", "rack-01", "rack-1", "rack-1a", "rack-002", "rack-9", "rack-10"]
