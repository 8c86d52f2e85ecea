"""The victim model: what a gang may lose (spare pods within its minimum, or everything), candidate
filtering by priority, and the order of costs."""
from __future__ import annotations

import numpy as np

from topology.preemption import Cost, RunningGang, RunningPod, candidate_gangs
from topology.preemption.candidates import GangInDomain, freed
from topology.preemption.cost import NO_VICTIM, cost_of

from planner_cases import GPU, free_matrix, request


def gang(key="ns/g", priority=0, nodes=(0, 1, 2, 3), **kwargs) -> RunningGang:
    return RunningGang(key, priority, {f"{key}-{i}": RunningPod(n, request(gpu=8)) for i, n in enumerate(nodes)},
                       **kwargs)


def test_spare_pods_follow_min_member_and_elastic_keys():
    assert gang().spare() == 0 and gang().eligible() == []                 # every pod needed
    assert gang(min_member=3).spare() == 1 and len(gang(min_member=3).eligible()) == 4
    elastic = gang(elastic=frozenset({"ns/g-2", "ns/g-3", "other"}))
    assert elastic.spare() == 2 and elastic.eligible() == ["ns/g-2", "ns/g-3"]
    both = gang(min_member=3, elastic=frozenset({"ns/g-2", "ns/g-3"}))
    assert both.spare() == 1 and both.eligible() == ["ns/g-2", "ns/g-3"]


def test_candidates_are_strictly_lower_priority_and_not_protected_or_own():
    gangs = [gang("ns/low", 1), gang("ns/equal", 5), gang("ns/high", 9), gang("ns/own", 0),
             gang("ns/protected", 0), RunningGang("ns/empty", 0, {})]
    found = candidate_gangs(gangs, 5, own="ns/own", protected={"ns/protected"})
    assert [g.key for g in found] == ["ns/low"]


def test_options_never_cut_a_gang_below_its_minimum():
    inside = np.array([True, True, True, False])
    options = GangInDomain.of(gang(min_member=2), inside).options(100)
    taken = sorted((len(o.pods), o.whole) for o in options)
    # nothing, any one or two of the 3 pods inside (only 2 may go), or the whole gang (4 pods)
    assert taken == [(0, False)] + [(1, False)] * 3 + [(2, False)] * 3 + [(4, True)]
    assert all(o.whole or len(o.pods) <= 2 for o in options)


def test_interchangeable_spare_pods_are_counted_not_enumerated():
    pods = {f"ns/g-{i}": RunningPod(0, request(gpu=1)) for i in range(6)}
    options = GangInDomain.of(RunningGang("ns/g", 0, pods, min_member=0), np.ones(1, dtype=bool)).options(100)
    assert [len(o.pods) for o in options] == [0, 1, 2, 3, 4, 5, 6]        # not 2**6 subsets


def test_freed_gives_back_the_victims_requests():
    free = free_matrix([0, 0, 0, 0])
    g = gang()
    after = freed(free, [GangInDomain.of(g, np.ones(4, dtype=bool)).whole()])
    assert after[:, GPU].tolist() == [8, 8, 8, 8] and free[:, GPU].tolist() == [0, 0, 0, 0]


def test_cost_order_priority_then_gangs_then_gpus_then_pods_then_rank():
    low_many = Cost(0, 2, 9, (5,))
    high_few = Cost(3, 0, 1, (0,))
    assert low_many < high_few                                              # priority first
    assert Cost(1, 0, 8, (9,)) < Cost(1, 1, 1, (0,))                        # then gangs broken
    assert Cost(1, 1, 9, (9,), units=8) < Cost(1, 1, 1, (0,), units=16)     # then GPUs evicted
    assert Cost(1, 1, 4, (9,)) < Cost(1, 1, 5, (0,))                        # then pods
    assert Cost(1, 1, 4, (0,)) < Cost(1, 1, 4, (1,))                        # then placement rank
    assert cost_of([]) == Cost(NO_VICTIM, 0, 0)


def test_fewest_gpus_evicted_before_fewest_pods():
    """Two pods of 1 GPU rather than one pod of 8, when either frees the room (issue 34: fewest evicted GPUs)."""
    import numpy as np

    from topology.preemption import RunningGang, RunningPod
    from topology.preemption.candidates import Choice

    big = RunningGang("ns/big", 0, {"ns/big-0": RunningPod(0, np.array([0, 8]))})
    small = RunningGang("ns/small", 0, {"ns/a": RunningPod(0, np.array([0, 1])), "ns/b": RunningPod(0, np.array([0, 1]))},
                        min_member=0)
    one_big = cost_of([Choice(big, ("ns/big-0",), True)], column=1)
    two_small = cost_of([Choice(small, ("ns/a", "ns/b"))], column=1)
    assert (one_big.pods, one_big.units) == (1, 8) and (two_small.pods, two_small.units) == (2, 2)
    assert two_small < one_big
