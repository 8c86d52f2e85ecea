"""The fragmentation measure: whole free nodes and domains, the largest gang that fits per level, in the
pure core (against plain loops), in /debug/topology, in /metrics and in `tas-extender topology`."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cli import main
from demo_figures import by_level, demo_cluster, most_in_one, pods_if_pods_gone, pods_of, whole_free_nodes
from service_helpers import GPU, make_client
from topology.fragmentation import ShapeError, Shape, default_shapes, measure, parse_shape
from topology.tree import Level, TopologyTree

RESOURCES = ["cpu", GPU]


@st.composite
def clusters(draw):
    depth = draw(st.integers(1, 3))
    count = draw(st.integers(1, 24))
    values = st.sampled_from(["a", "b", "c"])
    paths = [draw(st.none() | st.tuples(*[values] * depth)) for _ in range(count)]
    tree = TopologyTree("t", "test", [Level(f"example.com/l{i}") for i in range(depth)],
                        [f"n{i}" for i in range(count)], paths)
    gpus = np.array([draw(st.sampled_from([0, 4, 8])) for _ in range(count)], dtype=np.int64)
    allocatable = np.stack([np.full(count, 16_000), gpus], axis=1)
    used = np.array([draw(st.integers(0, int(g))) for g in gpus], dtype=np.int64)
    free = allocatable.copy()
    free[:, 1] -= used
    usable = np.array([draw(st.booleans()) or True for _ in range(count)]) & \
        np.array([draw(st.integers(0, 5)) > 0 for _ in range(count)])
    reclaim = np.zeros_like(free)
    reclaim[:, 1] = [draw(st.integers(0, int(u))) for u in used]
    return tree, paths, allocatable, free, usable, reclaim


def loop_measure(tree, paths, allocatable, free, usable, reclaim, gpus_per_pod):
    """Per level: {domain prefix: (unit nodes, whole free nodes)} and the largest pods per level."""
    depth = tree.depth
    stats = [dict() for _ in range(depth)]
    pods = [dict() for _ in range(depth)]
    pods_back = [dict() for _ in range(depth)]
    for i, path in enumerate(paths):
        if path is None:
            continue
        unit = allocatable[i, 1] > 0
        whole = unit and usable[i] and free[i, 1] == allocatable[i, 1]
        fit = free[i, 1] // gpus_per_pod if usable[i] else 0
        back = (free[i, 1] + reclaim[i, 1]) // gpus_per_pod if usable[i] else 0
        for level in range(depth):
            key = tuple(path[:level + 1])
            units, wholes = stats[level].get(key, (0, 0))
            stats[level][key] = (units + unit, wholes + whole)
            pods[level][key] = pods[level].get(key, 0) + fit
            pods_back[level][key] = pods_back[level].get(key, 0) + back
    free_domains = [sum(1 for units, wholes in level.values() if units and units == wholes) for level in stats]
    largest = [max(level.values(), default=0) for level in pods]
    largest_back = [max(level.values(), default=0) for level in pods_back]
    return free_domains, largest, largest_back


@settings(max_examples=150, deadline=None)
@given(clusters(), st.sampled_from([1, 4, 8]))
def test_the_measure_equals_a_plain_loop(case, gpus_per_pod):
    tree, paths, allocatable, free, usable, reclaim = case
    shape = Shape(f"{GPU}={gpus_per_pod}", {GPU: gpus_per_pod})
    found = measure(tree, RESOURCES, allocatable, free, usable, [shape], reclaim, below_priority=7)
    free_domains, largest, largest_back = loop_measure(tree, paths, allocatable, free, usable, reclaim, gpus_per_pod)
    assert [level.whole_free for level in found.levels[:tree.depth]] == free_domains
    # the extra "node" level: whole free unit nodes
    members = np.array([p is not None for p in paths])
    units = (allocatable[:, 1] > 0) & members
    assert found.levels[-1].whole_free == int((units & usable & (free[:, 1] == allocatable[:, 1])).sum())
    by_level = {item.level: item for item in found.largest}
    assert [by_level[level.display].pods for level in tree.levels] == largest
    assert [by_level[level.display].pods_reclaimed for level in tree.levels] == largest_back
    assert by_level["cluster"].pods == sum(int(free[i, 1] // gpus_per_pod) for i in range(len(paths))
                                          if members[i] and usable[i])


def test_shapes_parse_and_errors_name_the_valid_form():
    assert parse_shape("nvidia.com/gpu=8", RESOURCES) == Shape("nvidia.com/gpu=8", {GPU: 8})
    assert parse_shape("cpu=1500m, nvidia.com/gpu=1").request == {"cpu": 1500, GPU: 1}
    for bad, words in (("gpu", "resource=quantity"), ("fpga=1", "valid: cpu, nvidia.com/gpu"),
                       ("nvidia.com/gpu=eight", "eight"), ("nvidia.com/gpu=0", "positive"), ("", "resource=quantity")):
        with pytest.raises(ShapeError, match=words):
            parse_shape(bad, RESOURCES)


def test_default_shapes_are_one_unit_and_a_whole_node():
    allocatable = np.array([[16_000, 8], [16_000, 8], [16_000, 4], [8_000, 0]])
    assert [s.name for s in default_shapes(RESOURCES, allocatable)] == [f"{GPU}=1", f"{GPU}=8"]
    assert [s.name for s in default_shapes(["cpu"], allocatable[:, :1])] == ["cpu=1", "cpu=16"]


def test_debug_topology_reports_whole_free_domains_and_the_largest_gangs_on_the_demo():
    client = make_client()
    body = client.get("/debug/topology", params={"below_priority": 1000, "domains": "true"}).json()
    default = body["topologies"][0]["fragmentation"]
    assert default["resource"] == GPU and default["below_priority"] == 1000
    # the demo: every node wholly free and usable but node-16 (NotReady), node-24 (tainted) and the partly
    # used ones; racks a-block-1-rack-2 and b-block-2-rack-2 whole; no block or zone
    cluster = demo_cluster()
    tree = cluster.topologies["default"]
    assert [(level["level"], level["whole_free"], level["domains"]) for level in default["levels"]] == \
        [("zone", 0, 2), ("block", 0, tree.domain_count(1)), ("rack", 2, tree.domain_count(2)),
         ("host", whole_free_nodes(cluster), len(cluster.nodes))]
    racks = {d["id"].rsplit("/", 1)[-1]: d for d in default["levels"][2]["per_domain"]}
    assert racks["a-block-1-rack-1"]["whole_free_nodes"] == 2 and racks["a-block-1-rack-1"]["unit_nodes"] == 4
    largest = {(i["shape"], i["level"]): i for i in default["largest"]}
    assert largest[(f"{GPU}=8", "rack")]["pods"] == most_in_one(cluster, "rack") == 4
    assert largest[(f"{GPU}=8", "block")]["pods"] == most_in_one(cluster, "block")
    assert largest[(f"{GPU}=8", "cluster")]["pods"] == int(pods_of(cluster).sum())
    assert largest[(f"{GPU}=1", "cluster")]["pods"] == int(pods_of(cluster, 1).sum())
    # every demo pod has priority 0: all of them gone, every usable node is whole but where a claim holds GPUs
    gone = by_level(cluster, pods_if_pods_gone(cluster))
    assert largest[(f"{GPU}=8", "cluster")]["pods_if_lower_gone"] == gone[0]
    assert largest[(f"{GPU}=8", "block")]["pods_if_lower_gone"] == gone[2]
    shaped = client.get("/debug/topology", params={"shape": "nvidia.com/gpu=4"}).json()
    assert {i["shape"] for i in shaped["topologies"][0]["fragmentation"]["largest"]} == {f"{GPU}=4"}
    assert "per_domain" not in shaped["topologies"][0]["fragmentation"]["levels"][0]
    bad = client.get("/debug/topology", params={"shape": "gpu=4"})
    assert bad.status_code == 400 and "offered by no node" in bad.json()["detail"]


def test_metrics_expose_free_domains_and_largest_placeable():
    client = make_client()
    text = client.get("/metrics").text
    cluster = demo_cluster()
    assert 'tas_extender_free_domains{level="rack",topology="default"} 2.0' in text
    assert f'tas_extender_free_domains{{level="host",topology="default"}} {whole_free_nodes(cluster)}.0' in text
    assert 'tas_extender_largest_placeable{level="rack",shape="nvidia.com/gpu=8",topology="default"} 4.0' in text
    assert ('tas_extender_largest_placeable{level="cluster",shape="nvidia.com/gpu=1",topology="default"} '
            f'{int(pods_of(cluster, 1).sum())}.0') in text


def test_the_topology_command_prints_whole_free_domains_and_largest_gangs(capsys):
    assert main(["topology", "--below-priority", "1"]) == 0
    out = capsys.readouterr().out
    assert "a-block-1-rack-1                             24/32   whole free: 2/4 nodes" in out
    cluster = demo_cluster()
    tree = cluster.topologies["default"]
    blocks, racks, nodes = tree.domain_count(1), tree.domain_count(2), len(cluster.nodes)
    assert (f"whole free (every nvidia.com/gpu free, node usable): zone 0/2, block 0/{blocks}, "
            f"rack 2/{racks}, host {whole_free_nodes(cluster)}/{nodes}") in out
    row = next(line for line in out.splitlines() if line.strip().startswith("nvidia.com/gpu=8 ("))
    assert row.split()[-5:] == [str(n) for n in by_level(cluster, pods_if_pods_gone(cluster))]
    assert main(["topology", "--shape", "gpu=1"]) == 2
    assert "--shape" in capsys.readouterr().err
