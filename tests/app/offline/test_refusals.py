"""Refusals that tell the truth (issue 14 item 4): the best domain with the joint count of the whole
gang, the first constraint that breaks, and "can never fit" when even empty domains are too small."""
from __future__ import annotations

import json

import numpy as np
import pytest
from planner_cases import free_matrix, grid_topology, leaf, plan_input, request
from test_offline_plan import job, run, write

from topology.groups import Group
from topology.planner import plan_gang

WHOLE_NODE = request(gpu=8, cpu=8000)


def gpus(topology, busy=()):
    values = [8] * len(topology.node_names)
    for node in busy:
        values[node] = 0
    return free_matrix(values)


def reason(tmp_path, capsys, *objects) -> str:
    code, out, _ = run(capsys, "--workload", write(tmp_path, "w.yaml", *objects), "-o", "json")
    assert code == 1
    return json.loads(out)["gangs"][0]["reason"]


def test_kueue_required_level_on_the_template_counts_the_best_block(tmp_path, capsys):
    # every Kueue annotation sits on the pod template; each block of the fixture holds 3 pods of 8 GPUs
    text = reason(tmp_path, capsys, job("k", 4, **{"kueue.x-k8s.io/podset-required-topology": "example.com/block"}))
    assert text.startswith("block b1 fits 3 of 4 pods (8 nvidia.com/gpu each)"), text
    assert "fits 0" not in text


def test_preferred_level_is_not_blamed_when_the_cluster_is_too_small(tmp_path, capsys):
    # 6 pods of 8 GPUs fit in the whole cluster; the preferred rack is not what breaks
    text = reason(tmp_path, capsys, job("k", 7, **{"kueue.x-k8s.io/podset-preferred-topology": "example.com/rack"}))
    assert text.startswith("the cluster fits 6 of 7 pods (8 nvidia.com/gpu each)"), text
    assert "rack" not in text.split(";")[0] and "segments" not in text


def test_roles_are_counted_together_in_one_domain():
    # 1 chief + 8 workers, whole nodes, one block: block 0 has 8 free nodes, block 1 has 7
    topology = grid_topology((1, 2, 1, 8))
    root = Group("job", children=[leaf("chief", "chief", [0]), leaf("worker", "worker", range(8))],
                 required_level="block")
    inp = plan_input(root, topology, gpus(topology, busy=[8]), {"chief": WHOLE_NODE, "worker": WHOLE_NODE})
    plan = plan_gang(inp)
    assert not plan.placed
    assert plan.reason.startswith("block z0-b0 fits 8 of 9 pods together"), plan.reason
    assert "subgroup" not in plan.reason


def test_a_gang_larger_than_any_empty_domain_can_never_fit():
    topology = grid_topology((1, 2, 1, 8))
    free = gpus(topology, busy=[0, 1, 2, 3, 4, 5, 6, 7, 8])
    inp = plan_input(leaf("job", "w", range(16), required_level="block"), topology, free, {"w": WHOLE_NODE},
                     allocatable=gpus(topology))
    plan = plan_gang(inp)
    assert not plan.placed
    assert plan.reason.startswith("can never fit in this cluster: even when empty, block z0-b0 holds 8 "
                                  "of 16 pods (8 nvidia.com/gpu each)"), plan.reason


@pytest.mark.parametrize(("pods", "expected"), [
    (9, "can never fit in this cluster: even when empty, block z0-b0 holds 8 of 9 pods"),
    (4, "it is exclusive, and every block that could hold it runs pods of other gangs"),
])
def test_an_exclusive_gang_waits_for_other_gangs_only_when_it_fits_an_empty_block(pods, expected):
    topology = grid_topology((1, 2, 1, 8))
    occupied = [np.array([True]), np.array([True, True]), np.array([True, True])]
    root = leaf("lws", "w", range(pods), required_level="block", exclusive=True)
    inp = plan_input(root, topology, gpus(topology), {"w": WHOLE_NODE}, occupied=occupied,
                     allocatable=gpus(topology))
    assert plan_gang(inp).reason.startswith(expected)


def test_never_fits_on_a_cluster_dump(tmp_path, capsys):
    # blocks of 4 nodes: 5 pods of 8 GPUs in one block never fit, whatever finishes
    text = reason(tmp_path, capsys, job("k", 5, required="block"))
    assert text.startswith("can never fit in this cluster: even when empty, block b1 holds 4 of 5 pods"), text
    assert len(text) < 300
