"""Issue 34 part 4: pods of no gang are scored to keep whole nodes and domains free (binpack by default
for GPU pods; spread and neutral on request), in the pure core and through the prioritize verb."""
from __future__ import annotations

import numpy as np
import pytest

from service_helpers import bind, filter_, make_client, plain_pod, prioritize
from topology.fragmentation import packing_scores
from topology.tree import Level, TopologyTree

# two racks of two 8-GPU nodes: rack-a holds node 0 (6 used) and node 1 (empty); rack-b nodes 2, 3 empty
TREE = TopologyTree("t", "test", [Level("example.com/rack")], ["n0", "n1", "n2", "n3"],
                    [("rack-a",), ("rack-a",), ("rack-b",), ("rack-b",)])
ALLOCATABLE = np.array([[8], [8], [8], [8]])
FREE = np.array([[2], [8], [8], [8]])


def scores(request: int, mode: str = "binpack", free=FREE, nodes=(0, 1, 2, 3)) -> list[int]:
    return packing_scores(TREE, ALLOCATABLE, free, np.array([request]), np.array(nodes), 0, mode).tolist()


def test_binpack_fills_the_partly_used_node_then_its_rack_and_keeps_whole_racks_free():
    a_used, a_empty, b_empty, _ = scores(1)
    assert a_used > a_empty > b_empty                   # the used node, then the used rack's empty node
    assert scores(2)[0] == 10 and scores(4)[1] == 10    # the best candidate scores 10
    assert scores(4)[0] == 0                            # it does not fit there


def test_spread_is_the_reverse_and_neutral_is_flat():
    a_used, a_empty, b_empty, _ = scores(1, "spread")
    assert a_used < a_empty < b_empty
    assert scores(1, "neutral") == [5, 5, 5, 5]
    assert scores(1, nodes=(1, -1)) [1] == 0            # a name that is no node of the cluster
    with pytest.raises(ValueError, match="valid: binpack, spread, neutral"):
        scores(1, "tightest")


def test_a_gpu_pod_of_no_gang_goes_to_a_partly_used_node_not_an_empty_rack():
    """Demo cluster: node-01 and node-02 have 4 of 8 GPUs used (rack a-block-1-rack-1), node-03 is empty
    in that rack, node-05 is in the entirely free rack a-block-1-rack-2."""
    client = make_client()
    pod = plain_pod("notebook", gpus=1)
    found = prioritize(client, pod, ["node-01", "node-03", "node-05", "node-09"])
    assert found["node-01"] > found["node-03"] > found["node-05"] and found["node-09"] == 0     # node-09: full
    assert prioritize(client, plain_pod("web", cpu="2"), ["node-01", "node-05"]) == {"node-01": 5, "node-05": 5}
    neutral = make_client(plain_pods="neutral")
    assert set(prioritize(neutral, pod, ["node-01", "node-03", "node-05"]).values()) == {5}
    spread = make_client(plain_pods="spread")
    found = prioritize(spread, pod, ["node-01", "node-03", "node-05"])
    assert found["node-01"] < found["node-03"] < found["node-05"]


def test_after_a_bind_the_next_pod_fills_the_same_node():
    client = make_client()
    first, second = plain_pod("a", gpus=2), plain_pod("b", gpus=2)
    names = ["node-05", "node-06", "node-07", "node-08"]          # one empty rack
    assert len(set(prioritize(client, first, names).values())) == 1     # all alike: kube-scheduler picks
    best = "node-06"
    filter_(client, first)
    assert bind(client, first, best) == ""
    found = prioritize(client, second, names)
    assert found[best] == max(found.values()) and list(found.values()).count(found[best]) == 1


def test_the_simulator_places_bare_pods_as_kube_scheduler_would_with_our_scores():
    """A trace's bare GPU pod: binpack puts it beside used GPUs, neutral (kube-scheduler's LeastAllocated
    on cpu and memory) on the node with the most room; whole free racks are recorded over time."""
    import orjson

    from app.offline.policies import get_policy
    from app.offline.simulate import Simulation
    from app.offline.trace import parse_trace
    from topology.cluster import Cluster
    from topology.demo import demo_objects
    from topology.objects import ClusterObjects

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "notebook", "namespace": "lab"},
           "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}}
    lines = [orjson.dumps({"at": 0, "duration": 60, "workload": pod}).decode()]
    placed = {}
    for mode in ("binpack", "neutral"):
        cluster = Cluster.from_objects(ClusterObjects.from_objects(demo_objects()))
        result = Simulation(cluster, get_policy("tas"), parse_trace(lines), plain_pods=mode).run()
        (node,) = result.jobs[0].plans[0].slots.values()
        placed[mode] = (cluster, node, result)
    cluster, node, result = placed["binpack"]
    gpu = cluster.resources.column["nvidia.com/gpu"]
    assert cluster.capacity.used[node, gpu] > 0                         # beside the GPUs already in use
    cluster, node, _ = placed["neutral"]
    assert cluster.capacity.used[node, gpu] == 0                        # spread onto an empty node
    assert result.whole_racks and result.whole_racks[0][1] == 2         # the demo's two whole racks


def test_a_small_gang_goes_to_a_partly_used_rack_and_leaves_the_whole_racks_free():
    """The planner's binpack ranking (tightest domain first) already orders a small gang's candidate
    domains so: on the demo, 2 pods x 4 GPUs needing a rack land in a partly used rack, never in one of the
    two whole free racks."""
    from service_helpers import filter_, indexed_job, job_pods

    job = indexed_job("small", pods=2, gpus=4, segment=None, required="rack")
    client = make_client(job)
    before = client.get("/debug/topology").json()["topologies"][0]["fragmentation"]["levels"][2]["whole_free"]
    filter_(client, job_pods(job)[0])
    after = client.get("/debug/topology").json()["topologies"][0]["fragmentation"]["levels"][2]["whole_free"]
    assert before == after == 2
