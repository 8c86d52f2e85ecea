"""`tas-extender serve --demo-size N`: a generated fleet with running gangs and a refused one (docs/ui.md)."""
from __future__ import annotations

from collections import Counter

import pytest

from app.cli import main
from app.server import create_app
from app.settings import Settings
from topology.demo import fleet_objects, fleet_workloads


def test_the_fleet_has_the_asked_number_of_nodes_some_not_ready_or_tainted_and_small_pods():
    objects = fleet_objects(2048)
    kinds = Counter(o["kind"] for o in objects)
    assert kinds["Node"] == 2048 and kinds["Topology"] == 1 and kinds["Pod"] == 2048 // 12
    nodes = [o for o in objects if o["kind"] == "Node"]
    assert len({n["metadata"]["labels"]["network.example.com/rack"] for n in nodes}) == 2048 // 16
    assert sum(n["status"]["conditions"][0]["status"] == "False" for n in nodes) == 5
    assert sum(bool(n["spec"].get("taints")) for n in nodes) == 5
    assert objects == fleet_objects(2048)                              # the same fleet every time


def test_serving_a_fleet_binds_its_running_gangs_whole_in_one_block_and_refuses_the_whole_block_gang():
    app = create_app(Settings(demo_size=1024))
    state = app.state.service
    running, refused = fleet_workloads(1024)
    plans = {plan.key: plan for plan in state.plans}
    assert len(plans) == len(running) + 1
    whole_block = plans[f"research/pg-whole-block-{refused['metadata']['uid']}"]
    assert whole_block.status == "refused" and not whole_block.to_json()["never_fits"]
    assert "fits" in whole_block.reason and "of 256 pods" in whole_block.reason
    bound = [plan for key, plan in plans.items() if plan is not whole_block]
    assert all(plan.status == "bound" for plan in bound)
    cluster = state.cluster
    tree = cluster.topologies["default"]
    for plan in bound:
        nodes = [cluster.node_names.index(slot.node) for slot in plan.slots.values()]
        assert len({int(tree.node_domain[1][n]) for n in nodes}) == 1, plan.key        # one block
    gpus = sum(int(w["spec"]["parallelism"]) for w in running)
    assert 0.45 * 1024 <= gpus <= 0.6 * 1024


@pytest.mark.parametrize("argv, message", [
    (["--demo-size", "1000"], "error: --demo-size 1000: expected a multiple of 1,024 nodes"),
    (["--demo-size", "1024", "--cluster", "dump.yaml"], "error: --demo-size is a standalone demo"),
])
def test_a_bad_demo_size_is_one_line_and_exit_2(capsys, argv, message):
    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and len(err.strip().splitlines()) == 1


def test_placing_the_fleet_logs_a_summary_not_a_line_per_pod(caplog):
    """At 16,384 nodes the start logged 8,393 info lines, one per bound pod and planned gang."""
    import logging
    with caplog.at_level(logging.INFO):
        create_app(Settings(demo_size=1024))
    messages = [record.getMessage() for record in caplog.records if record.levelno == logging.INFO]
    assert "demo gangs placed" in messages and "bound" not in messages and len(messages) < 10, Counter(messages)
    assert logging.getLogger("app.scheduling").level == logging.NOTSET      # the service logs as before after
