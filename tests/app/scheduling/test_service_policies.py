"""A placement policy registered in one place (topology/planner/policies/) is accepted end to end: by the
`kai.scheduler/placement-strategy` annotation, by `--strategy` / TAS_STRATEGY, and places the gang in the
running service; unknown names are refused naming the registered ones."""
from __future__ import annotations

import pytest
from pydantic import ValidationError
from test_planner_policies import lastfit  # noqa: F401 - the fixture registering the toy LastFit policy

from app.cli import build_parser
from app.commands.serve import settings_from
from app.settings import Settings
from grouper import GroupingError, group_workload
from service_helpers import GPU, indexed_job, job_pods, make_client, schedule, service


PODS = 3          # more than the demo's DRA rack holds (2): the three policies choose three different racks


def _job(strategy: str | None) -> dict:
    job = indexed_job("toy", pods=PODS, gpus=8, required="rack", segment=None)
    if strategy:
        job["metadata"]["annotations"]["kai.scheduler/placement-strategy"] = strategy
    return job


def _last_fit(client) -> set[str]:
    """What LastFit must choose, from the service's own cluster: the last rack (domain order) with PODS
    nodes of 8 free GPUs, and its last PODS such nodes."""
    state = service(client)
    state.refresh()
    cluster = state.cluster
    tree = cluster.topologies["default"]
    rack = tree.level_index("rack")
    gpu = cluster.resources.column[GPU]
    for domain in reversed(range(tree.domain_count(rack))):
        nodes = [tree.node_names[n] for n in tree.nodes_in(rack, domain)]
        roomy = [n for n in nodes if cluster.free[cluster.node_index[n], gpu] >= 8]
        if len(roomy) >= PODS:
            return set(roomy[-PODS:])
    raise AssertionError("no rack holds the gang")


def test_the_annotation_picks_a_registered_policy_end_to_end(lastfit):  # noqa: F811
    job = _job("lastfit")
    assert group_workload(job)[0].strategy == "lastfit"
    client = make_client(job)
    expected = _last_fit(client)
    placed = {schedule(client, pod) for pod in job_pods(job)}
    assert placed == expected
    for builtin in ("binpack", "spread"):      # the demo cluster tells the three policies apart
        other = make_client(_job(builtin))
        assert {schedule(other, pod) for pod in job_pods(_job(builtin))} != placed


def test_the_service_setting_picks_a_registered_policy(lastfit):  # noqa: F811
    job = _job(None)
    client = make_client(job, strategy="lastfit")
    expected = _last_fit(client)
    assert {schedule(client, pod) for pod in job_pods(job)} == expected
    assert settings_from(build_parser().parse_args(["serve", "--strategy", "lastfit"])).strategy == "lastfit"


def test_an_unknown_policy_is_refused_naming_the_registered_ones(lastfit):  # noqa: F811
    with pytest.raises(ValidationError, match="strategy 'pack' is not valid; valid strategies: binpack, spread, "
                                              "lastfit"):
        Settings(strategy="pack")
    with pytest.raises(GroupingError, match="placement-strategy='pack' is invalid; "
                                            "valid values: binpack, spread, lastfit"):
        group_workload(_job("pack"))
