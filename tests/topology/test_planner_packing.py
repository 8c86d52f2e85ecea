"""The exact packing of one small domain (packing.py): the most pods, every mandatory one placed."""
from __future__ import annotations

import pytest

from topology.planner.packing import STEPS, TooLarge, most_pods

GPU = [(8,), (4,)]            # an 8-GPU role and a 4-GPU role, GPUs only


def test_two_small_pods_beat_one_large_one():
    """A node of 8 GPUs and one of 4: at most one 8-GPU pod and up to three 4-GPU pods."""
    rows = most_pods([(8,), (4,)], GPU, [[1, 2], [0, 1]], least=[0, 0], most=[1, 3])
    assert rows == [[0, 2], [0, 1]]


def test_mandatory_pods_are_always_placed():
    rows = most_pods([(8,), (4,)], GPU, [[1, 2], [0, 1]], least=[1, 0], most=[1, 3])
    assert rows == [[1, 0], [0, 1]]


def test_none_when_the_mandatory_pods_do_not_fit():
    assert most_pods([(8,), (4,)], GPU, [[1, 2], [0, 1]], least=[2, 0], most=[2, 3]) is None


def test_earlier_nodes_fuller_on_ties():
    assert most_pods([(8,), (8,)], [(8,)], [[1], [1]], least=[0], most=[1]) == [[1], [0]]


def test_a_search_beyond_its_budget_gives_up():
    nodes = 8
    free = [(64, 64, 64)] * nodes
    requests = [(1, 0, 0), (0, 1, 0), (0, 0, 1)]
    with pytest.raises(TooLarge):
        most_pods(free, requests, [[64, 64, 64]] * nodes, least=[0, 0, 0], most=[STEPS] * 3)
