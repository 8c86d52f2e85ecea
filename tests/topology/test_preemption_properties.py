"""Property tests of select_victims on tiny random clusters: no victim of equal or higher priority, the
plan is valid once the victims are gone (checked by the planner oracle), victims respect gang minimums,
and the cost (highest victim priority, gangs broken, pods evicted) is the brute-force minimum."""
from __future__ import annotations

from dataclasses import replace
from unittest.mock import patch

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topology.groups import Group, GroupTree, RoleSpec, SegmentInfo, Slot
from topology.plan import PlanInput
from topology.preemption import RunningGang, RunningPod, select_victims
from topology.preemption import select as select_module
from topology.tree import Level, TopologyTree

from oracle import check_plan
from planner_cases import RESOURCES, GPU, free_matrix, request
from preemption_oracle import cheapest

PREEMPTOR_PRIORITY = 2


@st.composite
def topologies(draw) -> TopologyTree:
    count = draw(st.integers(2, 6))
    racks = draw(st.integers(1, 3))
    paths = []
    for node in range(count):
        rack = draw(st.integers(0, racks - 1))
        paths.append((f"z{rack % 2}", f"z{rack % 2}-r{rack}"))
    levels = [Level("example.com/zone", "zone"), Level("example.com/rack", "rack")]
    return TopologyTree("t", "test", levels, [f"node-{i}" for i in range(count)], paths)


@st.composite
def preemptors(draw) -> tuple[GroupTree, int]:
    segments = draw(st.integers(1, 2))
    size = draw(st.integers(1, 3))
    segment_level = draw(st.sampled_from([None, "rack", "zone"]))
    root_required = draw(st.sampled_from([None, None, "zone"]))
    root_preferred = draw(st.sampled_from([None, "rack", "zone"]))
    children = [Group(f"seg-{s}", slots=[Slot("w", s * size + i) for i in range(size)],
                      required_level=segment_level, segment=SegmentInfo("w", s, size, segments))
                for s in range(segments)]
    root = Group("job", children=children, required_level=root_required, preferred_level=root_preferred)
    tree = GroupTree("ns", "job", "PyTorchJob", root, {"w": RoleSpec("w", segments * size)}, topology="t",
                     priority=PREEMPTOR_PRIORITY)
    return tree, draw(st.sampled_from([2, 4, 4, 8]))


@st.composite
def cases(draw):
    topology = draw(topologies())
    nodes = len(topology.node_names)
    capacity = np.array([draw(st.sampled_from([4, 8])) for _ in range(nodes)])
    left = capacity.copy()
    running = []
    for number in range(draw(st.integers(1, 5))):
        pods = {}
        for index in range(draw(st.integers(1, 3))):
            node = draw(st.integers(0, nodes - 1))
            gpus = draw(st.sampled_from([2, 4, 4, 8]))
            if left[node] >= gpus:
                left[node] -= gpus
                pods[f"g{number}/p{index}"] = RunningPod(node, request(gpu=gpus))
        if not pods:
            continue
        minimum = draw(st.sampled_from([None, None, *range(len(pods) + 1)]))
        elastic = draw(st.sampled_from([None, frozenset(sorted(pods)[:1])]))
        running.append(RunningGang(f"ns/g{number}", draw(st.integers(0, 3)), pods, minimum, elastic))
    tree, gpus = draw(preemptors())
    inp = PlanInput(tree=tree, topology=topology, free=free_matrix(left.tolist()), resources=RESOURCES,
                    node_names=list(topology.node_names), requests={"w": request(gpu=gpus)},
                    usable={"w": np.ones(nodes, dtype=bool)})
    return inp, running


def after_eviction(inp: PlanInput, running: list[RunningGang], victims) -> np.ndarray:
    """The free matrix recomputed from the victims alone."""
    free = inp.free.copy()
    pods = {key: pod for gang in running for key, pod in gang.pods.items()}
    for victim in victims:
        free[victim.node] += pods[victim.pod].request
    return free


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(cases())
def test_victims_are_strictly_lower_priority_and_keep_gang_minimums(case):
    inp, running = case
    result = select_victims(inp, running)
    if not result.found:
        return
    assert all(v.priority < PREEMPTOR_PRIORITY for v in result.victims)
    by_gang = {g.key: g for g in running}
    assert len({v.pod for v in result.victims}) == len(result.victims)
    for key in result.gangs:
        gang = by_gang[key]
        assert gang.priority < PREEMPTOR_PRIORITY
        taken = {v.pod for v in result.victims if v.gang == key}
        whole = {v.whole for v in result.victims if v.gang == key}
        assert len(whole) == 1
        if whole == {True}:
            assert taken == set(gang.pods)                      # a broken gang goes entirely
        else:
            assert taken <= set(gang.eligible()) and len(taken) <= gang.spare()


@SETTINGS
@given(cases())
def test_plan_is_valid_once_the_victims_are_gone(case):
    inp, running = case
    result = select_victims(inp, running)
    if not result.found:
        return
    free = after_eviction(inp, running, result.victims)
    assert np.array_equal(free, result.free)
    assert check_plan(replace(inp, free=free), result.plan) == []
    assert result.plan.placed and free[:, GPU].min() >= 0


@SETTINGS
@given(cases())
def test_cost_is_the_brute_force_minimum(case):
    inp, running = case
    result = select_victims(inp, running)
    best = cheapest(inp, running, PREEMPTOR_PRIORITY)
    if best is None:
        assert not result.found, result.explanation
        return
    assert result.found, f"brute force evicts {best}; select: {result.explanation}"
    assert result.cost.victims == best


@SETTINGS
@given(cases())
def test_greedy_search_keeps_every_rule_too(case):
    """The same checks with the exhaustive search switched off (every domain searched greedily)."""
    inp, running = case
    with patch.object(select_module, "EXACT_LIMIT", 0):
        result = select_victims(inp, running)
    best = cheapest(inp, running, PREEMPTOR_PRIORITY)
    assert result.found == (best is not None), result.explanation
    if not result.found:
        return
    assert result.cost.victims >= best
    assert all(v.priority < PREEMPTOR_PRIORITY for v in result.victims)
    free = after_eviction(inp, running, result.victims)
    assert check_plan(replace(inp, free=free), result.plan) == []
