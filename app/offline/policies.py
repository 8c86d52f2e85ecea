"""Placement policies the simulator can replay a trace with: our planner and two comparison policies.

- `tas`: the service's own gang and segment planner (topology/planner).
- `gang-most-free`: a topology-blind gang: every pod goes to the usable node with the most free GPUs,
  all mandatory pods or none.
- `kueue-bestfit`: Kueue's TAS BestFit greedy, per PodSet (role): count the pods (or whole slices of
  `segment-size` pods) that fit in every domain, pick the tightest domain at the requested level that
  holds them all (climbing a level at a time for a preferred level, splitting across the fullest domains
  at the top), then walk down level by level taking the domains with most room first and the tightest
  one that fits for the rest. A workload of several roles under one level is a PodSet group, as Kueue
  places a leader PodSet with its workers: the domain of that level is chosen for all roles together
  (a one-pod leader on the node that costs the workers the least room, then the tightest domain whose
  room for the largest role, next to the leaders, still holds it), and the workers are walked inside it.

Every policy answers a Plan (topology/plan.py) computed on the cluster's current free capacity; it
reserves nothing itself.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from topology.cluster import Cluster
from topology.counts import pods_per_node, segments_by_level, sum_by_level
from topology.groups import GroupTree, Slot
from topology.plan import Plan, PlanInput
from topology.planner import occupied_masks, plan_gang
from topology.tree import TopologyTree

from ..scheduling.plan_input import gang_plan_input
from .gangs import GPU, RoleNeeds, role_needs, split_gang


class Policy(Protocol):
    name: str
    description: str

    def place(self, cluster: Cluster, tree: GroupTree, explain: bool = True) -> Plan:
        """Where the gang would go on the cluster's current free capacity (nothing is reserved).
        `explain=False`: a refusal may skip saying why."""

    def view(self, cluster: Cluster, gangs: Sequence[tuple[GroupTree, dict[str, RoleNeeds]]]) -> bytes:
        """What `place` decides from for these gangs: equal views give equal plans (the simulator does
        not plan a refused job again while its view stays the same)."""


class PolicyError(ValueError):
    pass


# --- ours -----------------------------------------------------------------------------------------

@dataclass
class TasPolicy:
    strategy: str = "binpack"
    name: str = "tas"
    description: str = "our gang and segment planner (topology-aware, best fit)"

    def __post_init__(self) -> None:
        self._inputs: dict[int, tuple[Cluster, GroupTree, list, PlanInput]] = {}

    def place(self, cluster: Cluster, tree: GroupTree, explain: bool = True) -> Plan:
        try:
            return plan_gang(self._input(cluster, tree, explain))
        except (ValueError, KeyError) as err:
            return Plan(placed=False, reason=str(err).strip("'\""))

    def _input(self, cluster: Cluster, tree: GroupTree, explain: bool) -> PlanInput:
        """The gang's plan input on the cluster's free capacity now. What does not change while the
        cluster keeps its nodes (requests, usable nodes, why others are excluded) is built once per
        gang, and the planner keeps its analysis of the tree: the simulator asks again and again for
        the same gangs (never changed in place) on the same nodes."""
        occupied = occupied_nodes(cluster, tree)
        kept = self._inputs.get(id(tree))
        if kept is None or kept[0] is not cluster or kept[1] is not tree or len(kept[2]) != len(cluster.nodes) \
                or not all(map(operator.is_, kept[2], cluster.nodes)):
            if len(self._inputs) > 4096:
                self._inputs.clear()
            inp = replace(gang_plan_input(cluster, tree, strategy=self.strategy, occupied=occupied, explain=explain),
                          keep_analysis=True)
            self._inputs[id(tree)] = (cluster, tree, list(cluster.nodes), inp)
            return inp
        inp = kept[3]
        return replace(inp, free=cluster.capacity.snapshot(), occupied=occupied_masks(inp.topology, occupied),
                       explain=explain)


    def view(self, cluster: Cluster, gangs: Sequence[tuple[GroupTree, dict[str, RoleNeeds]]]) -> bytes:
        """The pods of each role that fit on every node, when a gang's roles all request the same: the
        planner then decides from those counts alone (a pod placed on a node takes one from every role's
        count there, and its bounds on free resources follow from the counts). Otherwise `free_view`."""
        if not all(_same_requests(needs) for _, needs in gangs):
            return free_view(cluster, gangs)
        free = cluster.free
        parts = [pods_per_node(free, need.request, need.usable).tobytes()
                 for _, needs in gangs for need in needs.values()]
        return b"".join(parts + occupied_view(cluster, gangs))


def _same_requests(needs: dict[str, RoleNeeds]) -> bool:
    requests = [need.request for need in needs.values()]
    return all(np.array_equal(request, requests[0]) for request in requests[1:])


def free_view(cluster: Cluster, gangs: Sequence[tuple[GroupTree, dict[str, RoleNeeds]]]) -> bytes:
    """The nodes where some pod of the gangs fits, with their free resources, and (exclusive gangs) the
    domains other pods occupy. Nodes where none fits change no decision: every policy places pods only
    where they fit, and the planner's bounds sum free resources only over such nodes."""
    free = cluster.free
    fits = np.zeros(len(free), dtype=bool)
    for _, needs in gangs:
        for need in needs.values():
            fits |= need.usable & np.all(free >= need.request, axis=1)
    nodes = np.flatnonzero(fits)
    parts = [np.int64(nodes.size).tobytes(), nodes.tobytes(), free[nodes].tobytes()]
    return b"".join(parts + occupied_view(cluster, gangs))


def occupied_view(cluster: Cluster, gangs: Sequence[tuple[GroupTree, dict[str, RoleNeeds]]]) -> list[bytes]:
    """For each gang with an exclusive group: which domains of every level run other pods."""
    parts = []
    for tree, _ in gangs:
        occupied = occupied_nodes(cluster, tree)
        if occupied is not None:
            topology = cluster.topologies.get(tree.topology) if tree.topology else None
            masks = occupied_masks(topology, occupied) if topology is not None else [occupied]
            parts += [np.packbits(mask).tobytes() for mask in masks]
    return parts


def occupied_nodes(cluster: Cluster, tree: GroupTree) -> np.ndarray | None:
    """For a gang with an exclusive group, the nodes running or holding pods of other LWS groups and other
    exclusive gangs (grouper/exclusive.py, as the service reads it); None when nothing is exclusive."""
    if not any(group.exclusive for group in tree.groups()):
        return None
    return cluster.apart_nodes(tree.key)


# --- a shared gang loop for the comparison policies ----------------------------------------------------

PlaceSlots = Callable[[np.ndarray, Sequence[Slot]], "dict[Slot, int] | str"]


def _gang_by_units(free: np.ndarray, tree: GroupTree, place_slots: PlaceSlots) -> Plan:
    """Mandatory slots all together, then each elastic unit on its own, best effort."""
    mandatory, optional = split_gang(tree.root)
    placed = place_slots(free, mandatory)
    if isinstance(placed, str):
        return Plan(placed=False, reason=placed)
    done: set[int] = set()
    unplaced: list[Slot] = []
    for unit in optional:
        more = place_slots(free, unit.slots) if unit.needs is None or id(unit.needs) in done else "skipped"
        if isinstance(more, str):
            unplaced += unit.slots
            continue
        placed.update(more)
        done.add(id(unit))
    reason = f"{len(unplaced)} elastic pod(s) did not fit" if unplaced else ""
    return Plan(placed=True, slots=placed, unplaced=unplaced, reason=reason)


def _take(free: np.ndarray, assignment: dict[Slot, int], needs: dict[str, RoleNeeds], sign: int = 1) -> None:
    for slot, node in assignment.items():
        free[node] -= sign * needs[slot.role].request


# --- topology-blind gang: most free GPUs first -----------------------------------------------------------

@dataclass
class GangMostFree:
    name: str = "gang-most-free"
    description: str = "topology-blind gang: each pod on the node with the most free GPUs"

    def place(self, cluster: Cluster, tree: GroupTree, explain: bool = True) -> Plan:
        needs = role_needs(cluster, tree)
        gpu = cluster.resources.column.get(GPU, cluster.resources.column["cpu"])

        def place_slots(free: np.ndarray, slots: Sequence[Slot]) -> dict[Slot, int] | str:
            assignment: dict[Slot, int] = {}
            for slot in slots:
                need = needs[slot.role]
                fits = need.usable & np.all(free >= need.request, axis=1)
                if need.unknown or not fits.any():
                    _take(free, assignment, needs, sign=-1)
                    missing = f" (no node offers {', '.join(need.unknown)})" if need.unknown else ""
                    return (f"{len(assignment)} of {len(slots)} pods placed: no usable node has room "
                            f"for {slot}{missing}")
                node = int(np.argmax(np.where(fits, free[:, gpu], -1)))
                assignment[slot] = node
                free[node] -= need.request
            return assignment

        return _gang_by_units(cluster.free.copy(), tree, place_slots)

    def view(self, cluster: Cluster, gangs: Sequence[tuple[GroupTree, dict[str, RoleNeeds]]]) -> bytes:
        return free_view(cluster, gangs)


# --- Kueue-style BestFit ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RoleConstraint:
    level: int | None            # None: no topology constraint (Kueue's implied, unconstrained mode)
    required: bool
    slice_size: int | None = None
    slice_level: int | None = None


@dataclass
class KueueBestFit:
    name: str = "kueue-bestfit"
    description: str = "Kueue TAS BestFit greedy, per PodSet; a workload's roles as one PodSet group"

    def place(self, cluster: Cluster, tree: GroupTree, explain: bool = True) -> Plan:
        needs = role_needs(cluster, tree)
        try:
            topology = cluster.topology(tree.topology) if tree.topology else None
            constraints = {role: role_constraint(tree, role, topology) for role in needs}
            together = gang_constraint(tree, topology)
        except (KeyError, ValueError) as err:
            return Plan(placed=False, reason=str(err).strip("'\""))
        free = cluster.free.copy()

        def place_slots(free: np.ndarray, slots: Sequence[Slot]) -> dict[Slot, int] | str:
            by_role = {role: sorted(s for s in slots if s.role == role)
                       for role in dict.fromkeys(slot.role for slot in slots)}
            for role in by_role:
                if needs[role].unknown:
                    return f"role {role}: no node offers {', '.join(needs[role].unknown)}"
            parts, part_needs, part_constraints = short_slices_apart(by_role, needs, constraints)
            if together is not None and len(parts) > 1:
                grouped = place_group(topology, free, parts, part_needs, part_constraints, together)
                if grouped is not None:
                    return grouped
            return place_roles(topology, free, parts, part_needs, part_constraints)

        return _partial_admission(free, tree, place_slots)

    def view(self, cluster: Cluster, gangs: Sequence[tuple[GroupTree, dict[str, RoleNeeds]]]) -> bytes:
        return free_view(cluster, gangs)


def short_slices_apart(by_role: dict[str, list[Slot]], needs: dict[str, RoleNeeds],
                       constraints: dict[str, RoleConstraint]):
    """A role whose pods are not a whole number of slices: its last, short slice as a PodSet of its
    own in the group (one slice of that size at the same level), since a Kueue slice is always whole."""
    parts, part_needs, part_constraints = dict(by_role), dict(needs), dict(constraints)
    for role, slots in by_role.items():
        c = constraints[role]
        short = len(slots) % c.slice_size if c.slice_size else 0
        if short and len(slots) > short:
            rest = f"{role} (last slice)"
            parts[role], parts[rest] = slots[:-short], slots[-short:]
            part_needs[rest] = needs[role]
            part_constraints[rest] = RoleConstraint(c.level, c.required, short, c.slice_level)
    return parts, part_needs, part_constraints


def place_roles(topology: TopologyTree | None, free: np.ndarray, by_role: dict[str, list[Slot]],
                needs: dict[str, RoleNeeds], constraints: dict[str, RoleConstraint],
                inside: np.ndarray | None = None) -> dict[Slot, int] | str:
    """Each role (PodSet) walked on its own, one after another, each seeing the others' usage;
    `inside`: only these nodes (the group's domain). `free` is updated only on success."""
    assignment: dict[Slot, int] = {}
    for role, role_slots in by_role.items():
        need = needs[role]
        usable = need.usable if inside is None else need.usable & inside
        nodes = kueue_assign(topology, pods_per_node(free, need.request, usable), len(role_slots),
                             constraints[role])
        if isinstance(nodes, str):
            _take(free, assignment, needs, sign=-1)
            return f"role {role}: {nodes}"
        role_assignment = dict(zip(role_slots, nodes))
        _take(free, role_assignment, needs)
        assignment.update(role_assignment)
    return assignment


def place_group(topology: TopologyTree, free: np.ndarray, by_role: dict[str, list[Slot]],
                needs: dict[str, RoleNeeds], constraints: dict[str, RoleConstraint],
                together: RoleConstraint) -> dict[Slot, int] | str | None:
    """Kueue's PodSet group: one domain of the group's level for every role. The smaller roles (the
    leaders) go first (place_leaders); among the domains where then the largest role (the workers) fits
    too, the tightest for it (fewest slices, then pods, then name). A preferred level climbs while no domain
    holds the group; None when none does at any level (each role then goes on its own, as Kueue
    splits at the top)."""
    workers = max(by_role, key=lambda role: (len(by_role[role]), role))
    leaders = {role: by_role[role] for role in sorted(by_role, key=lambda r: (len(by_role[r]), r)) if role != workers}
    levels = [together.level] if together.required else range(together.level, -1, -1)
    for level in levels:
        best: tuple | None = None
        for domain in _group_candidates(topology, free, by_role, needs, level):
            inside = topology.member & (topology.node_domain[level] == domain)
            trial = free.copy()
            placed = place_leaders(topology, trial, leaders, workers, needs, constraints, inside)
            if isinstance(placed, str):
                continue
            key = (_room(topology, trial, needs[workers], constraints[workers], inside),
                   topology.domain_ids[level][domain])
            if best is not None and key >= best[0]:
                continue
            rest = place_roles(topology, trial, {workers: by_role[workers]}, needs, constraints, inside)
            if not isinstance(rest, str):
                best = (key, {**placed, **rest}, trial)
        if best is not None:
            free[:] = best[2]
            return best[1]
    if together.required:
        pods = sum(len(slots) for slots in by_role.values())
        return (f"needs all {pods} pods of its {len(by_role)} roles in one "
                f"{topology.levels[together.level].display}; none holds them")
    return None


def place_leaders(topology: TopologyTree, free: np.ndarray, leaders: dict[str, list[Slot]], workers: str,
                  needs: dict[str, RoleNeeds], constraints: dict[str, RoleConstraint],
                  inside: np.ndarray) -> dict[Slot, int] | str:
    """Kueue's leader of a PodSet group (one pod) goes where it costs the workers least: fewest whole
    slices, then pods, of worker room lost, then the tightest node for itself, then name. Roles of more
    than one pod (which Kueue cannot group) are walked on their own."""
    assignment: dict[Slot, int] = {}
    for role, slots in leaders.items():
        if len(slots) != 1:
            more = place_roles(topology, free, {role: slots}, needs, constraints, inside)
            if isinstance(more, str):
                _take(free, assignment, needs, sign=-1)
                return more
            assignment.update(more)
            continue
        node = _leader_node(topology, free, needs[role], needs[workers], constraints[workers], inside)
        if node is None:
            _take(free, assignment, needs, sign=-1)
            return f"role {role}: no node of the domain has room"
        assignment[slots[0]] = node
        free[node] -= needs[role].request
    return assignment


def _leader_node(topology: TopologyTree, free: np.ndarray, leader: RoleNeeds, workers: RoleNeeds,
                 constraint: RoleConstraint, inside: np.ndarray) -> int | None:
    fits = pods_per_node(free, leader.request, leader.usable & inside)
    nodes = np.flatnonzero(fits > 0)
    if not nodes.size:
        return None
    before = pods_per_node(free, workers.request, workers.usable & inside)
    after = pods_per_node(free[nodes] - leader.request, workers.request, (workers.usable & inside)[nodes])
    pods_lost = before[nodes] - after
    slices_lost = np.zeros(nodes.size, dtype=np.int64)
    if constraint.slice_size:
        owner = topology.node_domain[constraint.slice_level]
        room = sum_by_level(topology, before)[constraint.slice_level]
        size = constraint.slice_size
        slices_lost = room[owner[nodes]] // size - (room[owner[nodes]] - pods_lost) // size
    names = np.array(topology.node_names, dtype=object)[nodes]
    order = np.lexsort((names, fits[nodes], pods_lost, slices_lost))
    return int(nodes[order[0]])


def _group_candidates(topology: TopologyTree, free: np.ndarray, by_role: dict[str, list[Slot]],
                      needs: dict[str, RoleNeeds], level: int) -> list[int]:
    """Domains where every role, alone, has room for its pods (the others can only take room away)."""
    keep = np.ones(topology.domain_count(level), dtype=bool)
    for role, slots in by_role.items():
        per_node = pods_per_node(free, needs[role].request, needs[role].usable)
        keep &= sum_by_level(topology, per_node)[level] >= len(slots)
    return np.flatnonzero(keep).tolist()


def _room(topology: TopologyTree, free: np.ndarray, need: RoleNeeds, constraint: RoleConstraint,
          inside: np.ndarray) -> tuple[int, int]:
    """(whole slices, pods) of a role that fit on `inside` nodes: what BestFit compares domains by."""
    per_node = pods_per_node(free, need.request, need.usable & inside)
    pods = int(per_node.sum())
    if not constraint.slice_size:
        return pods, pods
    slices = segments_by_level(topology, per_node, constraint.slice_level, constraint.slice_size)
    return int(slices[constraint.slice_level].sum()), pods


def _partial_admission(free: np.ndarray, tree: GroupTree, place_slots: PlaceSlots) -> Plan:
    """All pods if they fit, else the most elastic units that fit with the minimum (Kueue's
    partial admission searches the count the same way)."""
    mandatory, optional = split_gang(tree.root)

    def attempt(units: int) -> dict[Slot, int] | str:
        trial = free.copy()
        return place_slots(trial, mandatory + [s for u in optional[:units] for s in u.slots])

    best = attempt(len(optional))
    if isinstance(best, str) and optional:
        low, high = 0, len(optional) - 1
        best = attempt(0)
        if isinstance(best, str):
            return Plan(placed=False, reason=best)
        while low < high:
            middle = (low + high + 1) // 2
            found = attempt(middle)
            if isinstance(found, str):
                high = middle - 1
            else:
                best, low = found, middle
    if isinstance(best, str):
        return Plan(placed=False, reason=best)
    unplaced = [s for u in optional for s in u.slots if s not in best]
    reason = f"{len(unplaced)} elastic pod(s) did not fit" if unplaced else ""
    return Plan(placed=True, slots=best, unplaced=unplaced, reason=reason)


def role_constraint(tree: GroupTree, role: str, topology: TopologyTree | None) -> RoleConstraint:
    """What a Kueue PodSet annotation would say for one role: the finest required level among the groups
    holding all of the role's pods, else the finest preferred one; segments become slices when they
    have a required level (Kueue slices have no preferred form)."""
    if topology is None:
        return RoleConstraint(None, False)
    role_slots = {s for s in tree.slots() if s.role == role}
    required: int | None = None
    preferred: int | None = None
    slice_size = slice_level = None
    for group in tree.groups():
        if role_slots <= set(group.all_slots()):
            required = _finest(topology, required, group.required_level)
            preferred = _finest(topology, preferred, group.preferred_level)
        elif group.segment is not None and group.segment.role == role and group.required_level:
            slice_size, slice_level = group.segment.size, topology.level_index(group.required_level)
    level = required if required is not None else preferred
    if slice_level is not None and level is not None and slice_level < level:
        if required is not None:      # one domain finer than the slice level holds every slice anyway
            slice_size = slice_level = None
        else:                         # a preferred level finer than the slices cannot hold one slice
            level = slice_level
    return RoleConstraint(level, required is not None, slice_size, slice_level)


def gang_constraint(tree: GroupTree, topology: TopologyTree | None) -> RoleConstraint | None:
    """The level that keeps the whole workload together (Kueue: the PodSet group's shared topology
    request): the finest required level among the groups holding every pod, else the finest preferred
    one; None without either."""
    if topology is None:
        return None
    every = set(tree.slots())
    required = preferred = None
    for group in tree.groups():
        if every <= set(group.all_slots()):
            required = _finest(topology, required, group.required_level)
            preferred = _finest(topology, preferred, group.preferred_level)
    if required is None and preferred is None:
        return None
    return RoleConstraint(required if required is not None else preferred, required is not None)


def _finest(topology: TopologyTree, current: int | None, name: str | None) -> int | None:
    if not name:
        return current
    index = topology.level_index(name)
    return index if current is None else max(current, index)


# The domain walk. A place is (level, index); level == topology.depth means a node.

def kueue_assign(topology: TopologyTree | None, per_node: np.ndarray, count: int,
                 constraint: RoleConstraint) -> list[int] | str:
    """The node of each of `count` pods in placement order, or why they do not fit."""
    if count == 0:
        return []
    if topology is None:
        order = sorted(range(len(per_node)), key=lambda n: (-int(per_node[n]), n))
        chosen = _greedy(order, per_node, count)
        if chosen is None:
            return f"needs {count} pods, the usable nodes hold {int(per_node.sum())}"
        return _expand(sorted(chosen), count)
    return _Walk(topology, per_node, constraint).assign(count)


def _best_fit(order: Sequence[int], state: np.ndarray, need: int) -> int:
    """The first domain with the smallest state that is still >= need (order is most room first)."""
    best = order[0]
    for domain in order:
        if state[domain] >= need and state[domain] != state[best]:
            best = domain
    return best


def _greedy(order: Sequence[int], state: np.ndarray, need: int) -> list[tuple[int, int]] | None:
    """Most room first; the domain that completes the count is the tightest one that can."""
    chosen: list[tuple[int, int]] = []
    remaining = need
    for position, domain in enumerate(order):
        if state[domain] <= 0:
            break
        if state[domain] >= remaining:
            chosen.append((_best_fit(order[position:], state, remaining), remaining))
            return chosen
        chosen.append((domain, int(state[domain])))
        remaining -= int(state[domain])
    return None


def _expand(chosen: Sequence[tuple[int, int]], count: int) -> list[int]:
    nodes = [node for node, pods in chosen for _ in range(pods)]
    return nodes[:count]


class _Walk:
    def __init__(self, topology: TopologyTree, per_node: np.ndarray, constraint: RoleConstraint):
        self.topology = topology
        self.per_node = per_node
        self.constraint = constraint
        self.pods = sum_by_level(topology, per_node)
        self.slices = (segments_by_level(topology, per_node, constraint.slice_level, constraint.slice_size)
                       if constraint.slice_size else None)
        self.node_ids = [f"{topology.domain_ids[-1][d]}/{name}" if d >= 0 else name
                         for d, name in zip(topology.node_domain[-1], topology.node_names)]

    def state(self, level: int, in_slices: bool) -> np.ndarray:
        if level == self.topology.depth:
            return self.per_node
        return self.slices[level] if in_slices else self.pods[level]

    def ids(self, level: int) -> list[str]:
        return self.node_ids if level == self.topology.depth else self.topology.domain_ids[level]

    def sorted_places(self, level: int, candidates: Sequence[int], in_slices: bool) -> list[int]:
        state, ids = self.state(level, in_slices), self.ids(level)
        return sorted(candidates, key=lambda d: (-int(state[d]), ids[d]))

    def children(self, level: int, domains: Sequence[int]) -> list[int]:
        found = [self.topology.children_of(level, d) for d in domains]
        children = np.concatenate(found) if found else np.empty(0, dtype=np.int64)
        if level + 1 == self.topology.depth:
            children = children[self.topology.member[children]]
        return [int(c) for c in children]

    def assign(self, count: int) -> list[int] | str:
        c = self.constraint
        in_slices = self.slices is not None
        need = math.ceil(count / c.slice_size) if in_slices else count
        unit = "slices" if in_slices else "pods"
        level = c.level if c.level is not None else (c.slice_level if in_slices else self.topology.depth - 1)
        unconstrained = c.level is None
        found = self.find_level(level, need, c.required, unconstrained, in_slices)
        if isinstance(found, str):
            return found.format(unit=unit, need=need)
        level, chosen = found
        while in_slices and level < c.slice_level:
            chosen = self.descend(level, chosen, need, in_slices)
            level += 1
        if not in_slices:
            while level < self.topology.depth:
                chosen = self.descend(level, chosen, count, False)
                level += 1
            return _expand(sorted(chosen, key=lambda p: self.node_ids[p[0]]), count)
        return self.slices_to_nodes(level, chosen, count)

    def find_level(self, level: int, need: int, required: bool, unconstrained: bool, in_slices: bool):
        state = self.state(level, in_slices)
        order = self.sorted_places(level, range(len(state)), in_slices)
        if not order:
            return f"no domains at level {self.topology.levels[level].display}"
        top = order[0]
        if state[top] >= need or not required and (level == 0 or unconstrained):
            chosen = _greedy(order, state, need)
            if chosen is None:
                return ("needs {need} {unit}, all " + self.topology.levels[level].display +
                        f" domains together hold {int(state.sum())}")
            return level, chosen
        if required:
            return (f"needs {{need}} {{unit}} in one {self.topology.levels[level].display}, "
                    f"the best holds {int(state[top])}")
        return self.find_level(level - 1, need, required, unconstrained, in_slices)

    def descend(self, level: int, chosen: Sequence[tuple[int, int]], need: int, in_slices: bool):
        below = level + 1
        order = self.sorted_places(below, self.children(level, [d for d, _ in chosen]), in_slices)
        found = _greedy(order, self.state(below, in_slices), need)
        if found is None:       # cannot happen: the chosen domains hold `need` between them
            raise AssertionError("domain counts inconsistent")
        return found

    def slices_to_nodes(self, level: int, chosen: Sequence[tuple[int, int]], count: int) -> list[int]:
        """Each slice-level domain gets slices * size pods (the lexicographically last one gives back the
        missing pods of a short last segment), placed on its own nodes."""
        size = self.constraint.slice_size
        ids = self.ids(level)
        ordered = sorted(chosen, key=lambda p: ids[p[0]])
        short = sum(k for _, k in ordered) * size - count
        nodes: list[int] = []
        for position, (domain, slices) in enumerate(ordered):
            pods = slices * size - (short if position == len(ordered) - 1 else 0)
            placed = [(domain, pods)]
            for at in range(level, self.topology.depth):
                placed = self.descend(at, placed, pods, False)
            nodes += _expand(sorted(placed, key=lambda p: self.node_ids[p[0]]), pods)
        return nodes


POLICIES: dict[str, Callable[[], Policy]] = {
    "tas": TasPolicy,
    "gang-most-free": GangMostFree,
    "kueue-bestfit": KueueBestFit,
}


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise PolicyError(f"unknown policy {name!r}; valid policies: {', '.join(POLICIES)}") from None
