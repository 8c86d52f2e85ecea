"""Property tests against the brute-force oracle: on tiny random clusters, whenever some placement keeps
every hard rule, the planner places the gang; and no plan ever breaks a hard rule."""
from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import brute_force, check_plan
from planner_cases import RESOURCES, free_matrix, gang, request

from topology.groups import Group, Slot
from topology.plan import PlanInput
from topology.planner import plan_gang
from topology.tree import Level, TopologyTree

LEVELS = ("zone", "rack", "host")
# more for a long run: PLANNER_ORACLE_EXAMPLES=4000 pytest tests/topology/test_planner_oracle.py --hypothesis-seed=1
EXAMPLES = int(os.environ.get("PLANNER_ORACLE_EXAMPLES", "200"))


@st.composite
def topologies(draw) -> TopologyTree | None:
    if draw(st.integers(0, 9)) == 0:
        return None
    depth = draw(st.integers(1, 3))
    count = draw(st.integers(1, 8))
    paths = []
    for node in range(count):
        if draw(st.integers(0, 15)) == 0:
            paths.append(None)          # a node missing a level label
            continue
        values = [draw(st.integers(0, 1)) for _ in range(depth)]
        path = tuple(f"{LEVELS[l][0]}{'-'.join(map(str, values[:l + 1]))}" for l in range(depth - 1))
        paths.append(path + (f"node-{node}",) if depth > 1 else (f"z{values[0]}",))
    levels = [Level(f"example.com/{name}", name) for name in LEVELS[3 - depth:]]
    return TopologyTree("t", "test", levels, [f"node-{i}" for i in range(count)], paths)


@st.composite
def groups(draw, level_names, budget: list[int], roles, depth: int = 0, name: str = "g") -> Group:
    def level():
        return draw(st.sampled_from([None, None, *level_names])) if level_names else None

    required, preferred = level(), level()
    exclusive = bool(required) and draw(st.integers(0, 4)) == 0
    make_leaf = depth >= 2 or budget[0] <= 1 or draw(st.booleans())
    if make_leaf:
        size = draw(st.integers(1, max(1, min(3, budget[0]))))
        budget[0] -= size
        role = draw(st.sampled_from(roles))
        slots = []
        for _ in range(size):
            slots.append(Slot(role, budget[1]))
            budget[1] += 1
        minimum = draw(st.sampled_from([None, None, *range(size + 1)]))
        return Group(name, slots=slots, min_member=minimum, required_level=required,
                     preferred_level=preferred, exclusive=exclusive)
    children = []
    for i in range(draw(st.integers(1, 3))):
        if budget[0] <= 0:
            break
        children.append(draw(groups(level_names, budget, roles, depth + 1, f"{name}.{i}")))
    pods = sum(len(c.all_slots()) for c in children)
    return Group(name, children=children, required_level=required, preferred_level=preferred,
                 exclusive=exclusive,
                 min_subgroup=draw(st.sampled_from([None, None, *range(len(children) + 1)])),
                 min_member=draw(st.sampled_from([None, None, *range(pods + 1)])))


@st.composite
def instances(draw) -> PlanInput:
    topology = draw(topologies())
    nodes = len(topology.node_names) if topology is not None else draw(st.integers(1, 6))
    names = topology.node_names if topology is not None else [f"node-{i}" for i in range(nodes)]
    level_names = [level.display for level in topology.levels] if topology is not None else []
    roles = draw(st.sampled_from([["a"], ["a", "b"]]))
    root = draw(groups(level_names, [6, 0], roles))
    requests = {"a": request(gpu=draw(st.integers(1, 2)), cpu=draw(st.sampled_from([0, 1000]))),
                "b": request(gpu=draw(st.integers(0, 1)), cpu=draw(st.sampled_from([1000, 2000])))}
    free = free_matrix([draw(st.integers(0, 4)) for _ in range(nodes)],
                       [draw(st.sampled_from([0, 1000, 2000, 4000])) for _ in range(nodes)])
    usable = {role: np.array([draw(st.integers(0, 9)) > 0 for _ in range(nodes)]) for role in requests}
    occupied = None
    if topology is not None and draw(st.booleans()):
        busy = np.array([draw(st.integers(0, 3)) == 0 for _ in range(nodes)]) & topology.member
        occupied = []
        for level in range(topology.depth):
            mask = np.zeros(topology.domain_count(level), dtype=bool)
            mask[topology.node_domain[level][busy]] = True
            occupied.append(mask)
    bound = {}
    slots = root.all_slots()
    if slots and draw(st.integers(0, 4)) == 0:
        bound[draw(st.sampled_from(slots))] = draw(st.integers(0, nodes - 1))
    tree = gang(root, topology.name if topology is not None else None)
    return PlanInput(tree=tree, topology=topology, free=free, resources=RESOURCES, node_names=list(names),
                     requests=requests, usable=usable, bound=bound,
                     strategy=draw(st.sampled_from(["binpack", "spread"])), occupied=occupied)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_planner_places_whenever_brute_force_can(inp: PlanInput):
    plan = plan_gang(inp)
    paths = [inp.topology.node_path(i) for i in range(len(inp.node_names))] if inp.topology else None
    assert check_plan(inp, plan) == [], f"{plan}; {paths}; {inp.tree.root}; free={inp.free[:, 3].tolist()}"
    witness = brute_force(inp)
    if witness is not None:
        assert plan.placed, f"brute force found {witness}; planner refused: {plan.reason} {plan.details}; {paths}; {inp.tree.root}; free={inp.free[:, 3].tolist()} usable={inp.usable}"
    else:
        assert not plan.placed


@settings(max_examples=60, deadline=None)
@given(instances())
def test_plans_are_deterministic(inp: PlanInput):
    first, second = plan_gang(inp), plan_gang(inp)
    assert first.slots == second.slots and first.reason == second.reason and first.rank == second.rank


def test_a_subgroup_no_parent_needs_still_gives_the_pods_an_ancestor_needs():
    """Found by the property test above: the root needs 2 pods (minMember), its only child needs none of
    its subgroups (minSubGroup 0), the leaf below has one pod running outside the topology and one waiting.
    The waiting pod is what the root's minimum asks for; the planner refused ("its subgroups do not fit
    together") because it neither counted the running pod nor grew a leaf that was never entered."""
    leaf = Group("g.0.0", slots=[Slot("a", 0), Slot("a", 1)])
    root = Group("g", children=[Group("g.0", children=[leaf], min_subgroup=0)], min_member=2)
    topology = TopologyTree("t", "test", [Level("example.com/host", "host")], ["node-0", "node-1", "node-2"],
                            [None, ("z0",), None])
    inp = PlanInput(tree=gang(root, "t"), topology=topology, free=free_matrix([0, 1, 0], [0, 0, 0]),
                    resources=RESOURCES, node_names=["node-0", "node-1", "node-2"],
                    requests={"a": request(gpu=1, cpu=0)}, usable={"a": np.array([False, True, False])},
                    bound={Slot("a", 0): 0}, strategy="binpack")
    assert brute_force(inp) is not None
    plan = plan_gang(inp)
    assert plan.placed, plan.reason
    assert check_plan(inp, plan) == []
