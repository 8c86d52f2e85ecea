"""Completeness: the planner never gives up on a level while an untried domain could hold the whole
subtree (issue 15 item 1)."""
from __future__ import annotations

import dataclasses

import numpy as np

from oracle import brute_force, check_plan
from planner_cases import (free_matrix, grid_topology, leaf, plan_input, random_instance, random_limited_instance,
                           request, segmented)

from topology.groups import Group
from topology.planner import plan_gang

ROLES = {"master": request(gpu=8, cpu=8000), "worker": request(gpu=8, cpu=8000)}


def master_and_workers(workers: int) -> Group:
    return Group("job", children=[leaf("master", "master", [0]), leaf("worker", "worker", range(workers))],
                 required_level="rack")


def test_loose_rack_after_many_tight_racks_that_fit_each_role_but_not_both():
    """Nine racks of 4 hosts: eight hold 3 free nodes (enough for the master, enough for 3 workers, not
    for both), the last holds 4 and the whole gang; the per-role counts alone rank the tight ones first."""
    topology = grid_topology((1, 1, 9, 4))
    gpus = [8, 8, 8, 0] * 8 + [8, 8, 8, 8]
    inp = plan_input(master_and_workers(3), topology, free_matrix(gpus), ROLES)
    plan = plan_gang(inp)
    assert check_plan(inp, plan) == []
    assert plan.placed, plan.reason
    assert set(plan.slots.values()) == {32, 33, 34, 35}
    assert brute_force(inp) is not None


def test_a_gang_no_rack_holds_is_refused_quickly():
    """The joint filter rules out every tight rack before any is tried."""
    topology = grid_topology((1, 1, 9, 4))
    inp = plan_input(master_and_workers(3), topology, free_matrix([8, 8, 8, 0] * 9), ROLES)
    plan = plan_gang(inp)
    assert not plan.placed
    assert plan.details["candidates_tried"] == 0


# the CI run; a longer one: python benchmarks/bench_planner.py --oracle 20000
INSTANCES = 2000


def against_brute_force(make, seeds: range) -> tuple[list, list, int]:
    """(misses, broken rules, feasible instances) of the planner over `make(seed)` for the seeds."""
    misses, broken, feasible = [], [], 0
    for seed in seeds:
        inp = make(seed)
        plan = plan_gang(inp)
        problems = check_plan(inp, plan)
        if problems:
            broken.append((seed, problems))
        possible = brute_force(inp) is not None
        feasible += possible
        if possible != plan.placed:
            misses.append(seed)
    return misses, broken, feasible


def test_random_fragmented_instances_match_the_brute_force():
    """Seeded tiny fragmented clusters of 3-5 levels, gangs of a master and worker segments with
    minimums: the planner places exactly when some placement exists, and never breaks a rule."""
    misses, broken, feasible = against_brute_force(random_instance, range(INSTANCES))
    assert broken == [] and misses == []
    assert feasible > INSTANCES // 3          # the generator keeps producing instances worth checking


def test_random_instances_with_pods_per_node_limits_match_the_brute_force():
    """The same instances with the workers (or master and workers) held to 1 or 2 pods per node: the
    planner places exactly when some placement keeping the limit exists, and never exceeds it."""
    misses, broken, feasible = against_brute_force(random_limited_instance, range(INSTANCES // 2))
    assert broken == [] and misses == []
    assert feasible > INSTANCES // 8


def test_roles_sharing_a_node_limit_are_bounded_together():
    """Found by the long run: a master and six workers each held to one pod per node (one count on the
    node for both). Counting each role's pods per node on its own, the joint bound let both roles share
    a node, and the search spent its budget on blocks that could not hold them."""
    inp = random_limited_instance(5158)
    assert inp.per_node == {"m": 1, "w": 1}
    plan = plan_gang(inp)
    assert check_plan(inp, plan) == []
    assert plan.placed, plan.reason


def test_the_limits_of_the_random_instances_bind():
    """Planned without their limits, many of these gangs would break them (413 of the first 1,000)."""
    binding = 0
    for seed in range(200):
        inp = random_limited_instance(seed)
        unlimited = plan_gang(dataclasses.replace(inp, per_node={}))
        binding += unlimited.placed and bool(check_plan(inp, unlimited))
    assert binding > 40


def test_the_random_instances_cover_levels_roles_segments_and_minimums():
    instances = [random_instance(seed) for seed in range(200)]
    assert {inp.topology.depth for inp in instances} == {3, 4, 5}
    roots = [inp.tree.root for inp in instances]
    assert any({slot.role for slot in root.all_slots()} == {"m", "w"} for root in roots)
    assert any(group.min_member for root in roots for group in root.walk())
    assert any(group.min_subgroup for root in roots for group in root.walk())
    assert any(len(root.children) > 2 for root in roots)


def test_instances_the_search_budget_used_to_run_out_on():
    """Found by the long run: k of n children with a minMember; once a child could no longer fit what
    its parent still lacked, the search went on below it until the budget was spent."""
    for seed in (4377, 5136, 8579, 10415, 16215):
        inp = random_instance(seed)
        plan = plan_gang(inp)
        assert plan.placed and check_plan(inp, plan) == [], (seed, plan.reason)
        assert not plan.details["search_exhausted"]


def test_greedy_search_places_more_children_for_a_minimum():
    """With the budget spent, k children satisfied but minMember short goes on to the next children
    instead of giving up (seed 8579: minSubGroup 1, minMember 5 of 6 single-pod subgroups)."""
    inp = dataclasses.replace(random_instance(8579), search_budget=0)
    plan = plan_gang(inp)
    assert plan.placed and check_plan(inp, plan) == [], plan.reason


def master_and_segments(workers: int, size: int) -> Group:
    return Group("job", children=[leaf("master", "master", [0]), segmented("worker", workers, size, "rack")])


def test_a_subgroups_required_segments_prune_the_parents_domains():
    """Two racks have room for a segment of 4; the 15 workers need 3 racks for 4 and room for 3 more.
    The root's own counts pass (16 free nodes of 26), so the search used to try 75 placements of the
    master and the first segments before giving up; the segments of the subgroup rule the cluster out
    before any try, and the refusal names them."""
    topology = grid_topology((1, 2, 4, 4))
    inp = plan_input(master_and_segments(15, 4), topology, free_matrix([8, 8, 8, 8] * 2 + [8, 8, 8, 0] * 6),
                     ROLES)
    plan = plan_gang(inp)
    assert not plan.placed
    assert plan.details["candidates_tried"] == 0
    assert "subgroup job: " in plan.reason
    assert ("the cluster has room for all 15 pods (8 nvidia.com/gpu each), but not in segments of 4 at rack: they "
            "need 3 racks with room for 4 and room for 3 more, found 2") in plan.reason
    assert brute_force(dataclasses.replace(inp, topology=topology)) is None


def test_the_short_segment_needs_room_of_its_own():
    """Three racks hold a whole segment of 4 each and nothing more; the fourth, short segment of 3 has
    no rack left: refused before any try (it used to be tried 76 times). Give one rack 2 more free nodes
    and it fits."""
    topology = grid_topology((1, 2, 4, 4))
    workers = {"worker": ROLES["worker"]}
    tight = plan_input(segmented("worker", 15, 4, "rack"), topology,
                       free_matrix([8, 8, 8, 8] * 3 + [8, 8, 0, 0] * 5), workers)
    plan = plan_gang(tight)
    assert not plan.placed and plan.details["candidates_tried"] == 0
    assert "need 3 racks with room for 4 and room for 3 more, found 3 with no room for 3 more" in plan.reason
    assert brute_force(tight) is None
    roomy = plan_input(segmented("worker", 15, 4, "rack"), topology,
                       free_matrix([8, 8, 8, 8] * 3 + [8, 8, 8, 0] + [8, 8, 0, 0] * 4), workers)
    plan = plan_gang(roomy)
    assert plan.placed and check_plan(roomy, plan) == []


def test_roles_alike_start_from_one_count_and_are_updated_apart():
    """Master and worker ask the same of the same nodes: the state counts them once at the start, and a
    placement of one still updates both (every level, the single nodes included)."""
    from topology.planner.layout import layout_for
    from topology.planner.state import State

    topology = grid_topology((1, 1, 2, 2))
    layout = layout_for(topology, 4)
    everywhere = np.ones(4, dtype=bool)
    state = State(layout, free_matrix([8, 8, 8, 8]), ROLES, {"master": everywhere, "worker": everywhere})
    state.place("master", np.array([1]), np.array([1]), np.empty(0, dtype=np.int64))
    for role in ROLES:
        assert state.counts[role][layout.depth].tolist() == [1, 0, 1, 1]
        assert state.fit[role].tolist() == [1, 0, 1, 1]
        assert state.count(role, 2, np.array([0, 1])).tolist() == [1, 2]
        assert state.total[role] == 3


def test_a_segment_allotted_in_a_domain_that_failed_is_not_held_to_it_in_the_next():
    """Found by the long run (seed 3484): the job requires a rack, its workers a block, their segment a
    host. Tried first in a rack where the segment was allotted a host, the workers then entered a node
    of the next rack, where nothing is allotted: the old allotment still confined the segment to the
    first rack's host, and the only rack that holds the gang was refused."""
    inp = random_instance(3484)
    plan = plan_gang(inp)
    assert plan.placed and check_plan(inp, plan) == [], plan.reason
