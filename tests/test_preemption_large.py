"""Domains too big for the exhaustive search: the greedy search (spare pods, then whole gangs, lowest
priority first, then every victim the plan does not need spared again)."""
from __future__ import annotations

from dataclasses import replace
from unittest.mock import patch

import numpy as np

from topology.groups import GroupTree, RoleSpec
from topology.plan import PlanInput
from topology.preemption import RunningGang, RunningPod, select_victims
from topology.preemption import select as select_module
from topology.preemption.select import EXACT_LIMIT

from oracle import check_plan
from planner_cases import RESOURCES, free_matrix, grid_topology, leaf, request, segmented


def full_cluster(priority_of_block):
    """2 blocks x 4 racks x 4 nodes of 8 GPUs, each node running one single-pod workload whose name
    order has nothing to do with its place."""
    topology = grid_topology([2, 4, 4], names=("block", "rack", "host"))
    nodes = len(topology.node_names)
    scrambled = np.random.default_rng(7).permutation(nodes)
    running = [RunningGang(f"batch/w{int(scrambled[node]):02d}", priority_of_block(node // 16),
                           {f"batch/w{int(scrambled[node]):02d}-0": RunningPod(node, request(gpu=8))})
               for node in range(nodes)]
    return topology, running


def gang_input(topology, required="block", priority=10):
    root = segmented("w", 8, 4, segment_level="rack", required_level=required)
    tree = GroupTree("prod", "big", "PyTorchJob", root, {"w": RoleSpec("w", 8)}, topology="test", priority=priority)
    nodes = len(topology.node_names)
    return PlanInput(tree=tree, topology=topology, free=free_matrix([0] * nodes), resources=RESOURCES,
                     node_names=list(topology.node_names), requests={"w": request(gpu=8)},
                     usable={"w": np.ones(nodes, dtype=bool)})


def test_greedy_frees_two_whole_racks_in_the_cheaper_block():
    topology, running = full_cluster(lambda block: 5 if block == 0 else 1)
    assert 2 ** 16 > EXACT_LIMIT                       # 16 single-pod gangs per block: greedy
    inp = gang_input(topology)
    result = select_victims(inp, running)
    assert result.found, result.explanation
    assert result.level == "block" and result.domain.endswith("b1")
    assert len(result.victims) == 8 and result.cost.victims == (1, 0, 64, 8)  # single pods break no gang; 8 GPUs each
    racks = {int(topology.node_domain[1][v.node]) for v in result.victims}
    assert len(racks) == 2                             # two whole racks, one per segment
    assert check_plan(replace(inp, free=result.free), result.plan) == []


def test_greedy_keeps_priority_first():
    """Block 0 holds one priority-1 pod among priority-0 pods, block 1 only priority-2 pods: block 0 wins
    with victims of priority 0 only."""
    topology, running = full_cluster(lambda block: 0 if block == 0 else 2)
    running[5].priority = 1
    result = select_victims(gang_input(topology), running)
    assert result.found and result.cost.priority == 0
    assert all(v.node < 16 and v.node != 5 for v in result.victims)


def test_spare_pods_of_a_large_elastic_gang_are_taken_before_whole_gangs():
    topology, running = full_cluster(lambda block: 0)
    pods = {key: pod for gang in running[16:] for key, pod in gang.pods.items()}
    elastic = RunningGang("batch/elastic", 0, pods, min_member=4)       # block 1: one gang of 16, 12 spare
    # block 0: two-pod gangs (a single pod breaks no gang, so it would cost as little as a spare pod)
    pairs = [RunningGang(f"batch/pair{i}", 0, {**running[2 * i].pods, **running[2 * i + 1].pods}) for i in range(8)]
    result = select_victims(gang_input(topology), pairs + [elastic])
    assert result.found
    assert result.broken_gangs == [] and result.gangs == ["batch/elastic"]
    assert len(result.victims) == 8


def test_greedy_does_not_offer_again_a_gang_the_trim_spared():
    """Gang `d` (priority 0, one spare pod) sits on nodes the preemptor cannot use; gang `x` (priority 1)
    on the usable ones. The greedy search evicts both whole, trims `d` away, and must not offer `d`'s
    spare pod again: with three planner calls the answer is `x` alone."""
    root = leaf("w", "w", range(2))
    tree = GroupTree("prod", "small", "Job", root, {"w": RoleSpec("w", 2)}, priority=10)
    inp = PlanInput(tree=tree, topology=None, free=free_matrix([0] * 4), resources=RESOURCES,
                    node_names=[f"n{i}" for i in range(4)], requests={"w": request(gpu=8)},
                    usable={"w": np.array([False, False, True, True])})
    d = RunningGang("batch/d", 0, {f"batch/d-{i}": RunningPod(i, request(gpu=8)) for i in (0, 1)}, min_member=1)
    x = RunningGang("batch/x", 1, {f"batch/x-{i}": RunningPod(i, request(gpu=8)) for i in (2, 3)})
    with patch.object(select_module, "EXACT_LIMIT", 0):
        result = select_victims(inp, [d, x], budget=3)
    assert result.found, result.explanation
    assert result.gangs == ["batch/x"] and len(result.victims) == 2


def counting_planner():
    calls = []
    real = select_module.evaluate_domain

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    return calls, patch.object(select_module, "evaluate_domain", counted)


def test_no_lower_priority_pod_where_the_gang_could_go_skips_the_search_at_once():
    """Issue 14: a refused gang with nothing to evict must not pay for planner runs in every domain."""
    topology, running = full_cluster(lambda block: 50)               # every pod outranks the gang
    nodes = len(topology.node_names)
    # the gang fits by capacity on the free half (segments it cannot keep), yet no pod can be a victim
    inp = replace(gang_input(topology), free=free_matrix([8] * (nodes // 2) + [0] * (nodes // 2)))
    calls, patched = counting_planner()
    with patched:
        result = select_victims(inp, running, refused=True)
    assert not result.found and calls == []
    assert "no running pod of a priority lower than 10" in result.explanation


def test_the_search_is_bounded_in_time():
    topology, running = full_cluster(lambda block: 1)
    calls, patched = counting_planner()
    with patched:
        result = select_victims(gang_input(topology), running, seconds=0.0)
    assert not result.found and calls == []
    assert "time bound is spent" in result.explanation


def test_victims_that_cannot_help_cost_one_plan():
    """Issue 14: a refused gang whose lower-priority pods hold only CPU, while what it lacks is racks
    with room for its GPU segments, is answered after one plan with every such pod gone, not after
    planner runs in every block and level."""
    topology, _ = full_cluster(lambda block: 0)
    nodes = len(topology.node_names)
    # two nodes of each rack have 8 GPUs free: 8 pods fit by count in each block, no rack holds a segment
    inp = replace(gang_input(topology), free=free_matrix([8 if node % 4 < 2 else 0 for node in range(nodes)]))
    running = [RunningGang(f"batch/cpu{node}", 0, {f"batch/cpu{node}-0": RunningPod(node, request(cpu=1000))})
               for node in range(nodes)]
    calls, patched = counting_planner()
    with patched:
        result = select_victims(inp, running, refused=True)
    assert not result.found and len(calls) == 1
    assert "does not fit even with all 32 running pods of a priority lower than 10 gone" in result.explanation


def test_victims_that_can_help_are_still_searched_for_after_the_check():
    topology, running = full_cluster(lambda block: 5 if block == 0 else 1)
    calls, patched = counting_planner()
    with patched:
        result = select_victims(gang_input(topology), running, refused=True)
    assert result.found and result.domain.endswith("b1") and len(result.victims) == 8
    assert len(calls) > 1
