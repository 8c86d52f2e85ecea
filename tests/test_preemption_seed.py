"""The seed story of issue 9, pure: the planner frees leaf B by evicting exactly the job on nodes 4-7."""
from __future__ import annotations

import numpy as np

from topology.planner import plan_gang
from topology.preemption import RunningGang, RunningPod, select_victims

from oracle import check_plan
from planner_cases import request
from preemption_cases import seed_input


def test_without_preemption_the_gang_does_not_fit():
    inp, _ = seed_input()
    assert not plan_gang(inp).placed


def test_seed_story_evicts_exactly_the_job_on_nodes_4_to_7():
    inp, running = seed_input()
    result = select_victims(inp, running)
    assert result.found, result.explanation
    assert sorted(v.pod for v in result.victims) == [f"research/job-b-{i}" for i in range(4)]
    assert {v.node for v in result.victims} == {4, 5, 6, 7}
    assert all(v.whole and v.gang == "research/job-b" for v in result.victims)
    assert result.broken_gangs == ["research/job-b"]
    assert (result.level, result.domain) == ("leaf", "spine-0/leaf-b")
    nodes = result.plan.slots
    segment_units = [{nodes[s] // 4 for s in group.slots} for group in inp.tree.root.children]
    assert sorted(map(sorted, segment_units)) == [[1], [2]]          # one segment per unit, units 1 and 2
    assert sorted(nodes.values()) == list(range(4, 12))               # one pod per node
    after = inp.__class__(**{**inp.__dict__, "free": result.free})
    assert check_plan(after, result.plan) == []
    assert result.cost.victims == (0, 1, 32, 4)                # priority, gangs broken, GPUs, pods


def test_explanation_says_why_leaf_b():
    inp, running = seed_input()
    text = select_victims(inp, running).explanation
    assert text.startswith("leaf leaf-b: evicting gang research/job-b (4 pods, priority 0)")
    assert "leaf leaf-a: does not fit even with all 4 lower-priority pods there gone" in text


def test_never_both_jobs_even_when_the_first_is_cheaper_to_reach():
    inp, running = seed_input()
    result = select_victims(inp, running)
    assert result.gangs == ["research/job-b"]
    # job-b protected (its eviction was refused): the only way left breaks job-a, never both
    again = select_victims(inp, running, protected={"research/job-b"}, avoid={result.domain})
    assert again.found and again.gangs == ["research/job-a"]
    assert {v.node for v in again.victims} == {0, 1, 2, 3}


def test_equal_or_higher_priority_is_never_a_victim():
    inp, running = seed_input(priority=0)
    result = select_victims(inp, running)
    assert not result.found and "lower than 0" in result.explanation


def test_preemption_policy_never_does_not_preempt():
    inp, running = seed_input(policy="Never")
    result = select_victims(inp, running)
    assert not result.found and "Never" in result.explanation


def test_spare_pods_go_before_whole_gangs():
    """job-b may lose 2 of its 4 pods: a 2-pod gang needing one unit takes those two, breaking nothing."""
    inp, running = seed_input()
    running[1].min_member = 2
    inp.tree.root.children = inp.tree.root.children[:1]
    inp.tree.root.children[0].slots = inp.tree.root.children[0].slots[:2]
    inp.tree.root.preferred_level = "unit"
    inp.free[8:12] = 0                                                # unit 2 busy with higher priority pods
    result = select_victims(inp, running)
    assert result.found
    assert result.cost.victims == (0, 0, 16, 2) and result.broken_gangs == []
    assert {v.gang for v in result.victims} == {"research/job-b"}


def test_lower_priority_victims_win_over_fewer_victims():
    inp, running = seed_input()
    running[1].priority = 500                                         # job-b matters more than job-a
    running.append(RunningGang("other/job-c", 10, {"other/c-0": RunningPod(8, request(gpu=8))}))
    inp.free[8] = 0
    result = select_victims(inp, running)
    assert result.found, result.explanation
    # job-a (priority 0) plus job-c (priority 10) rather than job-b (priority 500)
    assert result.gangs == ["other/job-c", "research/job-a"]
    assert result.cost.priority == 10
    assert np.all(result.free >= 0)
