"""Independent of the planner: a checker that a plan keeps every hard rule, and a brute-force search
for tiny clusters that finds some placement keeping them all (or proves there is none).

The rules, read straight from the model:
- capacity: the pods a plan adds to a node fit in its free capacity; every pod on a usable node;
- a group with a required level has all its placed pods in one domain of that level (a running pod
  on a node outside the topology counts in none);
- an exclusive group's required domain holds no other gang (occupied; unless running pods pin the
  group there already) and no other pod of this gang;
- gang minimums: a leaf places at least min_member pods (all when None); an inner group has at least
  min_subgroup satisfied children (all when None) and at least min_member pods in its satisfied
  children; a plan places no new pod that does not count (in a group below its minimum);
- running (bound) slots stay where they are;
- pods per node (PlanInput.per_node): a node holds no more pods of the limited roles, together, than
  the limit of any of them it holds (the instances here give limited roles one limit).
"""
from __future__ import annotations

import numpy as np

from topology.groups import Group, Slot
from topology.plan import Plan, PlanInput


def level_index(inp: PlanInput, name: str | None) -> int | None:
    return None if name is None else inp.topology.level_index(name)


def useful(group: Group, placed) -> set[Slot]:
    """Placed pods of the subtree that count: those whose every group up to here is satisfied."""
    if not satisfied(group, placed):
        return set()
    if group.is_leaf:
        return {slot for slot in group.slots if slot in placed}
    return set().union(*(useful(child, placed) for child in group.children))


def satisfied(group: Group, placed) -> bool:
    if group.is_leaf:
        return sum(1 for slot in group.slots if slot in placed) >= group.leaf_min()
    k = len(group.children) if group.min_subgroup is None else group.min_subgroup
    if sum(1 for child in group.children if satisfied(child, placed)) < k:
        return False
    return sum(len(useful(child, placed)) for child in group.children) >= (group.min_member or 0)


def could_satisfy(group: Group, placed, open_slots) -> bool:
    """Whether placing every still-undecided slot could satisfy the group (a pruning bound)."""
    return satisfied(group, placed | open_slots)


def violations(inp: PlanInput, assignment: dict[Slot, int]) -> list[str]:
    """Every hard rule the assignment breaks (empty: it keeps them all), gang minimums included."""
    problems = hard_violations(inp, assignment)
    if not satisfied(inp.tree.root, set(assignment)):
        problems.append("gang minimums not met")
    return problems


def hard_violations(inp: PlanInput, assignment: dict[Slot, int]) -> list[str]:
    problems: list[str] = []
    slots = set(inp.tree.slots())
    used = np.zeros_like(inp.free)
    for slot, node in assignment.items():
        if slot not in slots:
            problems.append(f"{slot} is not a slot of the gang")
            continue
        if slot in inp.bound:
            if inp.bound[slot] != node:
                problems.append(f"running {slot} moved from node {inp.bound[slot]} to {node}")
            continue
        if not inp.usable[slot.role][node]:
            problems.append(f"{slot} on node {node}, which it may not use")
        if inp.topology is not None and not inp.topology.member[node]:
            problems.append(f"{slot} on node {node}, outside the topology")
        used[node] += inp.requests[slot.role]
    over = (used > 0) & (used > inp.free)
    for node in np.flatnonzero(over.any(axis=1)):
        problems.append(f"node {node} over capacity")
    problems += _over_node_limits(inp, assignment)
    for group in inp.tree.groups():
        level = level_index(inp, group.required_level)
        if level is None:
            continue
        nodes = [assignment[s] for s in group.all_slots() if s in assignment]
        domains = {int(inp.topology.node_domain[level][n]) for n in nodes} - {-1}   # -1: outside
        if len(domains) > 1:
            problems.append(f"group {group.name} spans {len(domains)} domains of its required level")
        if group.exclusive and len(domains) == 1:
            domain = domains.pop()
            running = any(s in inp.bound for s in group.all_slots())   # running pods pin it there
            if inp.occupied is not None and inp.occupied[level][domain] and not running:
                problems.append(f"exclusive group {group.name} shares its domain with another gang")
            own = set(group.all_slots())
            if any(int(inp.topology.node_domain[level][n]) == domain
                   for s, n in assignment.items() if s not in own):
                problems.append(f"exclusive group {group.name} shares its domain with other pods of the gang")
    return problems


def _over_node_limits(inp: PlanInput, assignment: dict[Slot, int]) -> list[str]:
    limited: dict[int, list[str]] = {}
    for slot, node in assignment.items():
        if slot.role in inp.per_node:
            limited.setdefault(node, []).append(slot.role)
    return [f"node {node} holds {len(roles)} pods of roles limited to {min(inp.per_node[r] for r in roles)}"
            for node, roles in limited.items() if len(roles) > min(inp.per_node[r] for r in roles)]


def check_plan(inp: PlanInput, plan: Plan) -> list[str]:
    if not plan.placed:
        return [] if plan.reason else ["refusal without a reason"]
    problems = violations(inp, plan.slots)
    wasted = len(set(plan.slots) - useful(inp.tree.root, set(plan.slots)) - set(inp.bound))
    if wasted:
        problems.append(f"{wasted} pods placed in groups below their minimum")
    missing = set(inp.tree.slots()) - set(plan.slots)
    if missing != set(plan.unplaced):
        problems.append("unplaced does not list exactly the slots left out")
    for slot, node in inp.bound.items():
        if slot in set(inp.tree.slots()) and plan.slots.get(slot) != node:
            problems.append(f"running {slot} not kept on its node")
    return problems


def brute_force(inp: PlanInput) -> dict[Slot, int] | None:
    """Some assignment keeping every rule, by exhaustive search (tiny instances only)."""
    tree = inp.tree
    bound = {slot: node for slot, node in inp.bound.items() if slot in set(tree.slots())}
    leaves = [g for g in tree.groups() if g.is_leaf]
    todo = [(leaf, slot) for leaf in leaves for slot in leaf.slots if slot not in bound]
    nodes = len(inp.node_names)
    required = []
    for group in tree.groups():
        level = level_index(inp, group.required_level)
        if level is not None:
            required.append((set(group.all_slots()), level))
    free = inp.free.copy()
    assignment = dict(bound)
    limited = np.zeros(nodes, dtype=np.int64)          # pods of per_node roles on each node
    for slot, node in bound.items():
        limited[node] += slot.role in inp.per_node

    def consistent(slot: Slot, node: int) -> bool:
        for members, level in required:
            if slot in members:
                domain = inp.topology.node_domain[level][node]
                for other in members:
                    if other in assignment and inp.topology.node_domain[level][assignment[other]] not in (domain, -1):
                        return False
        return True

    def search(position: int, previous: tuple) -> bool:
        open_slots = {slot for _, slot in todo[position:]}
        if not could_satisfy(tree.root, set(assignment), open_slots):
            return False
        if position == len(todo):
            return not violations(inp, assignment)
        leaf, slot = todo[position]
        # slots of one leaf and role are interchangeable: choose nodes in non-decreasing order
        same = previous[0] == leaf.name and previous[1] == slot.role
        start = previous[2] if same else 0
        member = inp.topology.member if inp.topology is not None else np.ones(nodes, dtype=bool)
        for node in range(start, nodes):
            if node == nodes:
                break
            request = inp.requests[slot.role]
            if not (inp.usable[slot.role][node] and member[node]) or (free[node] < request).any():
                continue
            if not consistent(slot, node):
                continue
            limit = inp.per_node.get(slot.role)
            if limit is not None and limited[node] >= limit:
                continue
            free[node] -= request
            limited[node] += limit is not None
            assignment[slot] = node
            if search(position + 1, (leaf.name, slot.role, node)):
                return True
            del assignment[slot]
            free[node] += request
            limited[node] -= limit is not None
        # leave it out (every later slot of the same leaf and role is then left out too)
        if same and previous[2] == nodes:
            return search(position + 1, previous)
        return search(position + 1, (leaf.name, slot.role, nodes))

    if search(0, (None, None, 0)):
        return dict(assignment)
    return None
