"""Gang preemption for exclusive gangs (LeaderWorkerSet exclusive-topology): the chosen domain is emptied
of every other gang (they are all victims) or not chosen, and a domain whose only other pods are
victims counts as free once they are gone. On the seed fabric: three units of four 8-GPU nodes."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from topology.groups import Group, GroupTree, RoleSpec, Slot
from topology.plan import PlanInput
from topology.preemption import RunningGang, RunningPod, select_victims
from topology.preemption.select import EXACT_LIMIT

from planner_cases import RESOURCES, free_matrix, request
from preemption_cases import UNIT_OF_NODE, seed_topology

HIGH, PREEMPTOR = 5000, 1000


def running_gang(key: str, priority: int, pods: list[tuple[int, int]]) -> RunningGang:
    """pods: (node, gpus) per pod."""
    return RunningGang(key, priority, {f"{key}-{i}": RunningPod(node, request(gpu=gpus))
                                       for i, (node, gpus) in enumerate(pods)})


def preemptor(*, exclusive: bool = True, pods: int = 4) -> GroupTree:
    root = Group("job", slots=[Slot("worker", i) for i in range(pods)], required_level="unit", exclusive=exclusive)
    return GroupTree("prod", "lws", "LeaderWorkerSet", root, {"worker": RoleSpec("worker", pods)}, topology="fabric",
                     priority=PREEMPTOR)


def make(gpus: int, running: list[RunningGang], *, exclusive: bool = True,
         pods: int = 4) -> tuple[PlanInput, np.ndarray]:
    """A preemptor of `pods` x `gpus` GPUs; the plan input (free capacity with every running pod) and the
    pods of other gangs per node."""
    topology = seed_topology()
    free = free_matrix([8] * 12)
    others = np.zeros(12, dtype=np.int64)
    for gang in running:
        for pod in gang.pods.values():
            free[pod.node] -= pod.request
            others[pod.node] += 1
    inp = PlanInput(tree=preemptor(exclusive=exclusive, pods=pods), topology=topology, free=free,
                    resources=RESOURCES, node_names=list(topology.node_names),
                    requests={"worker": request(gpu=gpus)}, usable={"worker": np.ones(12, dtype=bool)})
    return inp, others


def unit_nodes(unit: int) -> list[int]:
    return [n for n, u in enumerate(UNIT_OF_NODE) if u == unit]


def check_valid(inp: PlanInput, others: np.ndarray, result, running: list[RunningGang]) -> None:
    """Independently: capacity holds once the victims are gone, the gang lies in the chosen unit, no
    victim has the preemptor's priority or more, and (exclusive) nobody else is left in that unit."""
    assert result.found and result.plan is not None and result.plan.placed
    free = inp.free.copy()
    left = others.copy()
    pods = {key: pod for gang in running for key, pod in gang.pods.items()}
    for victim in result.victims:
        assert victim.priority < PREEMPTOR
        free[pods[victim.pod].node] += pods[victim.pod].request
        left[pods[victim.pod].node] -= 1
    for slot, node in result.plan.slots.items():
        free[node] -= inp.requests[slot.role]
    assert (free >= 0).all()
    unit = int(result.domain.rsplit("-", 1)[-1])
    assert {UNIT_OF_NODE[node] for node in result.plan.slots.values()} == {unit}
    if inp.tree.root.exclusive:
        assert (left[unit_nodes(unit)] == 0).all(), "another gang keeps running in the exclusive unit"


def test_exclusive_gang_evicts_everyone_in_the_only_free_able_unit_even_pods_it_has_room_beside():
    # units 0 and 2 hold high-priority pods; unit 1 holds a low gang of 2 small pods: room for the
    # preemptor without evicting anything, but exclusivity needs the whole unit
    running = [running_gang("ops/high-a", HIGH, [(0, 1)]), running_gang("ops/high-b", HIGH, [(8, 1)]),
               running_gang("dev/low", 0, [(4, 1), (5, 1)])]
    inp, others = make(7, running)
    result = select_victims(inp, running, occupied_count=others)
    check_valid(inp, others, result, running)
    assert result.domain == "spine-0/leaf-b/unit-1"
    assert sorted(v.pod for v in result.victims) == ["dev/low-0", "dev/low-1"]
    notes = {o.domain: o.note for o in result.outcomes}
    assert "may not be evicted" in notes["spine-0/leaf-a/unit-0"]


def test_exclusive_gang_skips_the_cheaper_unit_a_higher_priority_pod_keeps():
    # unit 0: a priority-0 gang fills it, and a high-priority cpu-only pod stays there;
    # unit 1: a priority-10 gang fills it; unit 2: high-priority pods fill it
    running = [running_gang("dev/cheap", 0, [(n, 8) for n in unit_nodes(0)]),
               running_gang("ops/sidecar", HIGH, [(0, 0)]),
               running_gang("dev/dearer", 10, [(n, 8) for n in unit_nodes(1)]),
               running_gang("ops/serving", HIGH, [(n, 8) for n in unit_nodes(2)])]
    inp, others = make(8, running)
    result = select_victims(inp, running, occupied_count=others)
    check_valid(inp, others, result, running)
    assert result.domain == "spine-0/leaf-b/unit-1"
    assert {v.gang for v in result.victims} == {"dev/dearer"}


def test_non_exclusive_gang_takes_the_cheaper_unit_as_before():
    running = [running_gang("dev/cheap", 0, [(n, 8) for n in unit_nodes(0)]),
               running_gang("ops/sidecar", HIGH, [(0, 0)]),
               running_gang("dev/dearer", 10, [(n, 8) for n in unit_nodes(1)]),
               running_gang("ops/serving", HIGH, [(n, 8) for n in unit_nodes(2)])]
    inp, others = make(8, running, exclusive=False)
    with_counts = select_victims(inp, running, occupied_count=others)
    without = select_victims(inp, running)
    check_valid(inp, others, with_counts, running)
    assert with_counts.domain == without.domain == "spine-0/leaf-a/unit-0"
    assert {v.pod for v in with_counts.victims} == {v.pod for v in without.victims}
    assert {v.gang for v in with_counts.victims} == {"dev/cheap"}


def test_exclusive_gang_refused_when_every_unit_keeps_a_higher_priority_pod():
    running = [running_gang(f"ops/high-{u}", HIGH, [(unit_nodes(u)[0], 1)]) for u in range(3)]
    running.append(running_gang("dev/low", 0, [(n, 8) for n in unit_nodes(1)]))
    inp, others = make(8, running)
    result = select_victims(inp, running, occupied_count=others)
    assert not result.found and result.victims == []
    assert "may not be evicted" in result.explanation


def test_greedy_search_on_many_small_gangs_still_empties_the_exclusive_unit():
    # 16 single-pod gangs (more choices than the exact search takes): the preemptor fits beside them,
    # so only exclusivity asks to evict them all, and sparing "unused" victims must not undo that
    running = [running_gang("ops/high-a", HIGH, [(0, 1)]), running_gang("ops/high-b", HIGH, [(8, 1)])]
    running += [running_gang(f"dev/pod-{n}-{k}", 0, [(n, 1)]) for n in unit_nodes(1) for k in range(4)]
    assert 2 ** 16 > EXACT_LIMIT
    inp, others = make(4, running)
    result = select_victims(inp, running, occupied_count=others)
    check_valid(inp, others, result, running)
    assert result.domain == "spine-0/leaf-b/unit-1" and len(result.victims) == 16


def test_without_counts_the_plan_input_occupancy_is_used_as_given():
    # the old contract: inp.occupied alone (victims or not) -> every unit with a pod is closed
    from topology.planner import occupied_masks
    running = [running_gang("dev/low", 0, [(n, 8) for n in unit_nodes(1)]),
               running_gang("ops/high", HIGH, [(0, 1), (8, 1)])]
    inp, others = make(8, running)
    inp.occupied = occupied_masks(inp.topology, others > 0)
    assert not select_victims(inp, running).found
    assert select_victims(inp, running, occupied_count=others).domain == "spine-0/leaf-b/unit-1"


@st.composite
def clusters(draw):
    """Up to two pods per node (at most 4 GPUs each) in a few gangs of random priority."""
    gangs: dict[str, tuple[int, list[tuple[int, int]]]] = {}
    names = [f"g{i}" for i in range(draw(st.integers(1, 5)))]
    priorities = {name: draw(st.sampled_from([0, 10, HIGH])) for name in names}
    for node in range(12):
        for _ in range(draw(st.integers(0, 2))):
            name = draw(st.sampled_from(names))
            gangs.setdefault(name, (priorities[name], []))[1].append((node, draw(st.integers(0, 4))))
    running = [running_gang(f"ns/{name}", priority, pods) for name, (priority, pods) in sorted(gangs.items())]
    return running, draw(st.integers(1, 8))


@settings(max_examples=60, derandomize=True)
@given(clusters())
def test_exclusive_preemption_empties_the_unit_or_finds_none(case):
    running, gpus = case
    inp, others = make(gpus, running)
    result = select_victims(inp, running, occupied_count=others)
    protected = np.zeros(12, dtype=bool)
    for gang in running:
        if gang.priority >= PREEMPTOR:
            for pod in gang.pods.values():
                protected[pod.node] = True
    # one pod per node after its unit is emptied: a unit works iff no protected pod is in it
    possible = [u for u in range(3) if not protected[unit_nodes(u)].any()]
    assert result.found == bool(possible)
    if result.found:
        check_valid(inp, others, result, running)
        assert int(result.domain.rsplit("-", 1)[-1]) in possible
