"""Of equally tight candidate domains, the one holding the fewest of the cluster's largest holes comes
first (topology/planner/holes.py)."""
from __future__ import annotations

import numpy as np
from oracle import check_plan
from planner_cases import free_matrix, grid_topology, leaf, plan_input, request

from topology.groups import Group
from topology.planner import plan_gang
from topology.planner.holes import fewest_holes_first, holes_below
from topology.planner.layout import Layout
from topology.planner.state import State

EIGHT_GPUS = {"w": request(gpu=8, cpu=100)}


def test_equally_tight_blocks_the_one_with_fewer_free_racks_takes_the_gang():
    """Two zones of one block of three racks of two nodes. Zone 0's block has two free racks (room 2, 2,
    0), zone 1's one (2, 1, 1): both hold a 3-pod gang that requires a block with one node to spare.
    By name it went to zone 0 and broke both its free racks (one free rack left in the cluster); now it
    takes zone 1's racks of 2 and 1, and zone 0 keeps two free racks for a gang that needs whole racks."""
    topology = grid_topology((2, 1, 3, 2))
    free = free_matrix([8, 8, 8, 8, 0, 0, 8, 8, 8, 0, 8, 0])
    inp = plan_input(Group("job", children=[leaf("w", "w", range(3))], required_level="block"), topology,
                     free, EIGHT_GPUS)
    plan = plan_gang(inp)
    assert check_plan(inp, plan) == [] and plan.placed
    assert plan.groups["job"].domain == "z1/z1-b0"
    assert sorted(plan.slots.values()) == [6, 7, 8]


def test_holes_below_counts_the_roomiest_domains_of_each_level_below():
    topology = grid_topology((2, 1, 3, 2))
    layout = Layout(topology, len(topology.node_names))
    free = free_matrix([8, 8, 8, 8, 0, 0, 8, 8, 8, 0, 8, 0])
    state = State(layout, free, EIGHT_GPUS, {"w": np.ones(12, dtype=bool)})
    racks, hosts, nodes = holes_below(state, "w", 1, np.array([0, 1]))
    assert racks.tolist() == [2, 1] and hosts.tolist() == [4, 4] and nodes.tolist() == [4, 4]
    assert [keys.tolist() for keys in holes_below(state, "w", 0, np.array([1]))] == [[1], [1], [4], [4]]


def test_holes_rank_only_the_candidates_tied_on_every_other_key():
    """Counting holes only for tied candidates orders them as counting them for all would."""
    rng = np.random.default_rng(15)
    topology = grid_topology((2, 3, 3, 2))
    layout = Layout(topology, len(topology.node_names))
    for _ in range(200):
        free = free_matrix(rng.choice([0, 8, 16], size=36).tolist())
        state = State(layout, free, EIGHT_GPUS, {"w": np.ones(36, dtype=bool)})
        level = int(rng.integers(0, 3))
        domains = np.sort(rng.choice(layout.size(level), size=min(layout.size(level), 5), replace=False))
        keys = [domains, rng.integers(0, 2, size=domains.size), rng.integers(0, 3, size=domains.size)]
        every = np.lexsort([keys[0], *reversed(holes_below(state, "w", level, domains)), *keys[1:]])
        assert fewest_holes_first(state, "w", level, domains, keys, np.lexsort(keys)).tolist() == every.tolist()
