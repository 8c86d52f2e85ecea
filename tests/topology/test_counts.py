"""Every vectorized answer of topology.counts equals a plain per-node Python loop (hypothesis)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology.counts import UNBOUNDED, hop_distance, hop_distances, pods_per_node, segments_by_level, sum_by_level
from topology.tree import Level, TopologyTree

SETTINGS = settings(max_examples=120, deadline=None)
VALUES = st.sampled_from(["a", "b", "rack-1", "rack-2", "rack-10", "x01", "x1"])   # repeated under parents
AMOUNT = st.one_of(st.integers(-4, 40), st.integers(2**53, 2**57))   # beyond float64: sums stay exact


@st.composite
def trees(draw):
    """A random topology: depth 1-4, random branching from a small value alphabet, some non-members."""
    depth = draw(st.integers(1, 4))
    count = draw(st.integers(1, 30))
    paths = [draw(st.none() | st.tuples(*[VALUES] * depth)) for _ in range(count)]
    levels = [Level(f"example.com/level-{i}") for i in range(depth)]
    return TopologyTree("random", "test", levels, [f"node-{i}" for i in range(count)], paths), paths


@st.composite
def scenarios(draw):
    tree, paths = draw(trees())
    resources = draw(st.integers(1, 4))
    free = np.array([[draw(AMOUNT) for _ in range(resources)] for _ in paths], dtype=np.int64)
    request = np.array([draw(st.integers(0, 6)) for _ in range(resources)], dtype=np.int64)
    request[draw(st.integers(0, resources - 1))] = draw(st.integers(1, 6))    # requests ask for something
    usable = np.array([draw(st.booleans()) for _ in paths], dtype=bool)
    return tree, paths, free, request, usable


# --- plain loops -------------------------------------------------------------------------------------

def loop_pods_per_node(free, request, usable):
    result = []
    for i in range(len(free)):
        fits = [max(int(free[i][r]), 0) // int(request[r]) for r in range(len(request)) if request[r] > 0]
        result.append(min(fits) if usable[i] else 0)
    return result


def domain_id(path, level):
    return "/".join(path[: level + 1])


def loop_sum_by_level(paths, per_node, depth):
    sums = [{} for _ in range(depth)]
    for path, value in zip(paths, per_node):
        if path is not None:
            for level in range(depth):
                sums[level][domain_id(path, level)] = sums[level].get(domain_id(path, level), 0) + int(value)
    return sums


def loop_hops(place_a, place_b, depth):
    """Edges between two places given as (path prefix, node name or None), path of length level + 1."""
    (path_a, node_a), (path_b, node_b) = place_a, place_b
    chain_a = list(path_a) + ([node_a] if node_a else [])
    chain_b = list(path_b) + ([node_b] if node_b else [])
    if chain_a == chain_b:
        return 0
    common = 0
    while common < min(len(chain_a), len(chain_b)) and chain_a[common] == chain_b[common]:
        common += 1
    return (len(chain_a) - common) + (len(chain_b) - common)


def as_dict(tree, level, values):
    return {tree.domain_ids[level][d]: int(v) for d, v in enumerate(values)}


# --- properties ----------------------------------------------------------------------------------------

@SETTINGS
@given(trees())
def test_domain_ids_and_parents_follow_the_paths(drawn):
    tree, paths = drawn
    for i, path in enumerate(paths):
        for level in range(tree.depth):
            domain = int(tree.node_domain[level][i])
            if path is None:
                assert domain == -1
                continue
            assert tree.domain_ids[level][domain] == domain_id(path, level)
            parent = int(tree.parent[level][domain])
            assert parent == (int(tree.node_domain[level - 1][i]) if level else -1)
    for level in range(tree.depth):
        expected = {domain_id(p, level) for p in paths if p is not None}
        assert sorted(tree.domain_ids[level]) == sorted(expected)


@SETTINGS
@given(scenarios())
def test_pods_per_node_equals_the_loop(scenario):
    _, _, free, request, usable = scenario
    assert pods_per_node(free, request, usable).tolist() == loop_pods_per_node(free, request, usable)
    assert pods_per_node(free, request).tolist() == loop_pods_per_node(free, request, [True] * len(free))


@SETTINGS
@given(scenarios())
def test_sum_by_level_equals_the_loop_at_every_level(scenario):
    tree, paths, free, request, usable = scenario
    per_node = pods_per_node(free, request, usable)
    expected = loop_sum_by_level(paths, per_node, tree.depth)
    sums = sum_by_level(tree, per_node)
    assert [as_dict(tree, level, sums[level]) for level in range(tree.depth)] == expected
    # raw capacity columns, with byte-sized values, are summed exactly too
    column = free[:, 0]
    assert [as_dict(tree, level, s) for level, s in enumerate(sum_by_level(tree, column))] == \
        loop_sum_by_level(paths, column, tree.depth)


@SETTINGS
@given(scenarios(), st.data())
def test_segments_by_level_equals_the_loop(scenario, data):
    tree, paths, free, request, usable = scenario
    segment_level = data.draw(st.integers(0, tree.depth - 1))
    size = data.draw(st.integers(1, 5))
    per_node = pods_per_node(free, request, usable)
    pods = loop_sum_by_level(paths, per_node, tree.depth)[segment_level]
    result = segments_by_level(tree, per_node, segment_level, size)
    for level in range(tree.depth):
        if level > segment_level:
            assert result[level] is None
            continue
        expected = {}
        for segment_domain, count in pods.items():
            prefix = "/".join(segment_domain.split("/")[: level + 1])
            expected[prefix] = expected.get(prefix, 0) + count // size
        assert as_dict(tree, level, result[level]) == expected


def places(tree, paths):
    """Every node and every domain as ((level, index), (path prefix, node name or None))."""
    result = [((tree.depth, i), (paths[i], f"node-{i}")) for i in range(len(paths)) if paths[i] is not None]
    for level in range(tree.depth):
        for d, ident in enumerate(tree.domain_ids[level]):
            result.append(((level, d), (tuple(ident.split("/")), None)))
    return result


@SETTINGS
@given(trees())
def test_hop_distances_equal_the_loop(drawn):
    tree, paths = drawn
    for (level, index), place in places(tree, paths):
        distances = hop_distances(tree, level, index).tolist()
        for j, path in enumerate(paths):
            expected = -1 if path is None else loop_hops(place, (path, f"node-{j}"), tree.depth)
            assert distances[j] == expected


@SETTINGS
@given(trees())
def test_hop_distance_equals_the_loop(drawn):
    tree, paths = drawn
    everything = places(tree, paths)
    for a, place_a in everything:
        for b, place_b in everything:
            assert hop_distance(tree, a, b) == loop_hops(place_a, place_b, tree.depth)
    outside = [(tree.depth, i) for i, p in enumerate(paths) if p is None]
    for a in outside:
        assert (hop_distances(tree, *a) == -1).all()
        for b, _ in everything:
            assert hop_distance(tree, a, b) == hop_distance(tree, b, a) == -1
        for b in outside:
            assert hop_distance(tree, a, b) == (0 if a == b else -1)


# --- the examples and edge cases --------------------------------------------------------------------

DC_PATHS = [("dc", "zone-a", "rack-1"), ("dc", "zone-a", "rack-1"), ("dc", "zone-a", "rack-2"),
            ("dc", "zone-b", "rack-1")]


def dc_tree():
    levels = [Level("dc", "datacenter"), Level("zone"), Level("rack")]
    return TopologyTree("dc", "test", levels, ["n0", "n1", "n2", "n3"], DC_PATHS)


def test_two_nodes_in_one_rack_are_two_apart():
    tree = dc_tree()
    assert hop_distance(tree, (3, 0), (3, 1)) == 2
    assert hop_distances(tree, 3, 0).tolist() == [0, 2, 4, 6]


def test_a_rack_in_one_zone_is_five_from_a_node_in_another_zone():
    tree = dc_tree()
    rack = tree.domain_index[2]["dc/zone-a/rack-1"]
    assert hop_distance(tree, (2, rack), (3, 3)) == 5
    assert hop_distances(tree, 2, rack).tolist() == [1, 1, 3, 5]
    assert hop_distance(tree, (2, rack), (0, 0)) == 2      # rack -> zone -> datacenter


def test_unbounded_when_nothing_is_requested_and_zero_when_unusable():
    free = np.array([[4, 0], [8, 0]], dtype=np.int64)
    assert pods_per_node(free, np.array([0, 0])).tolist() == [UNBOUNDED, UNBOUNDED]
    assert pods_per_node(free, np.array([2, 0]), np.array([True, False])).tolist() == [2, 0]
    assert pods_per_node(np.array([[-3, 5]]), np.array([1, 1])).tolist() == [0]   # overcommitted


def test_unbounded_counts_add_up_without_overflow():
    # a request of nothing fits "any number" of pods on every node; their sums must stay positive
    nodes = 4096
    tree = TopologyTree("flat", "test", [Level("zone"), Level("rack")], [f"n{i}" for i in range(nodes)],
                        [("z", f"r{i % 8}") for i in range(nodes)])
    fit = pods_per_node(np.zeros((nodes, 2), dtype=np.int64), np.array([0, 0]))
    zone, racks = sum_by_level(tree, fit)
    assert zone.tolist() == [nodes * UNBOUNDED] and racks.tolist() == [nodes // 8 * UNBOUNDED] * 8
    assert segments_by_level(tree, fit, 1, 4)[0].tolist() == [8 * (nodes // 8 * UNBOUNDED // 4)]


def test_segments_reject_a_bad_level_or_size():
    tree = dc_tree()
    with pytest.raises(ValueError, match="segment_level 3 is not a level of topology 'dc'"):
        segments_by_level(tree, np.ones(4, dtype=np.int64), 3, 2)
    with pytest.raises(ValueError, match="segment_size must be at least 1"):
        segments_by_level(tree, np.ones(4, dtype=np.int64), 2, 0)
