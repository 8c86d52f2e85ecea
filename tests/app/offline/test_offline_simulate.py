"""`tas-extender simulate` on a tiny trace with hand-checkable results.

Cluster (tests/fixtures/offline/cluster.yaml): one zone, blocks b1 and b2 with 2 racks of 2 nodes of
8 GPUs; n1 has 4 GPUs used by another pod, n8 is tainted. So each block holds 3 pods of 8 GPUs.

Trace (tests/fixtures/offline/trace.jsonl), all pods 8 GPUs unless said:
  t=0   train     PyTorchJob 1 master + 2 workers, block required, 100 s  -> placed 0, one block full
  t=10  too-wide  Job of 4, block required, 50 s                          -> never fits (3 per block)
  t=20  second    Job of 3, block required, 30 s                          -> placed 20, the other block
  t=30  single    Job of 1, 10 s                                          -> waits for second: 50..60
  t=40  serve     LWS leader + 2 workers, block required, 10 s            -> a block is free at 60: 60..70
  t=45  small     Job of 1 with 4 GPUs, 5 s                                -> n1's 4 free GPUs: 45..50,
                                                                             ahead of the pending ones
"""
from __future__ import annotations

import paths
import io
import json
from pathlib import Path

import numpy as np
import pytest

from app.cli import main
from app.cluster_file import load_cluster
from app.offline.metrics import contended, utilization
from app.offline.output import ProgressBar
from app.offline.policies import get_policy
from app.offline.simulate import Simulation
from app.offline.trace import parse_trace, read_trace
from app.offline.workloads import WorkloadError

FIXTURES = paths.FIXTURES / "offline"
CLUSTER = str(FIXTURES / "cluster.yaml")
TRACE = str(FIXTURES / "trace.jsonl")
EXPECTED = {   # workload: (placed, finished)
    "team/train": (0, 100), "team/too-wide": (None, None), "team/second": (20, 50),
    "team/single": (50, 60), "team/serve": (60, 70), "team/small": (45, 50),
}


def simulate(policy: str, entries=None):
    cluster = load_cluster(CLUSTER)
    return Simulation(cluster, get_policy(policy), entries or read_trace(TRACE)).run()


@pytest.mark.parametrize("policy", ["tas", "kueue-bestfit"])
def test_queueing_and_finish_times(policy):
    results = simulate(policy).results()
    assert [r["workload"] for r in results] == list(EXPECTED)
    assert {r["workload"]: (r["placed"], r["finished"]) for r in results} == EXPECTED


@pytest.mark.parametrize("policy", ["tas", "kueue-bestfit"])
def test_a_workload_that_never_fits_says_why(policy):
    never = next(r for r in simulate(policy).results() if r["workload"] == "team/too-wide")
    assert never["pods"] == [] and never["placed"] is None
    assert "block" in never["reason"] and "4" in never["reason"]


def test_result_lines_have_exactly_the_documented_fields():
    for line in simulate("tas").results():
        assert list(line) == ["workload", "submitted", "placed", "finished", "pods", "reason"]
        assert all(list(pod) == ["role", "index", "node"] for pod in line["pods"])
        assert (line["reason"] == "") == (line["placed"] is not None)


def test_pods_are_expanded_as_their_controllers_create_them():
    pods = {r["workload"]: [(p["role"], p["index"]) for p in r["pods"]] for r in simulate("tas").results()}
    assert pods["team/train"] == [("master", 0), ("worker", 0), ("worker", 1)]
    assert pods["team/second"] == [("job", 0), ("job", 1), ("job", 2)]
    assert pods["team/serve"] == [("leader", 0), ("worker", 1), ("worker", 2)]
    assert pods["team/single"] == [("job", 0)]


@pytest.mark.parametrize("policy", ["tas", "kueue-bestfit", "gang-most-free"])
def test_capacity_is_never_exceeded_and_required_blocks_hold(policy):
    cluster = load_cluster(CLUSTER)
    results = simulate(policy).results()
    gpus = {"team/small": 4}
    free = {name: 8 for name in cluster.node_names}
    free["n1"] = 4
    times = sorted({r["placed"] for r in results if r["placed"] is not None})
    for t in times:
        used: dict[str, int] = {}
        for r in results:
            if r["placed"] is not None and r["placed"] <= t < r["finished"]:
                for pod in r["pods"]:
                    used[pod["node"]] = used.get(pod["node"], 0) + gpus.get(r["workload"], 8)
        assert all(used[n] <= free[n] for n in used), (t, used)
        assert "n8" not in used
    if policy != "gang-most-free":
        for r in results:
            if r["workload"] != "team/small" and r["pods"]:
                assert len({pod["node"] in ("n1", "n2", "n3", "n4") for pod in r["pods"]}) == 1


def test_topology_blind_policy_places_what_others_refuse():
    result = simulate("gang-most-free")
    wide = next(r for r in result.results() if r["workload"] == "team/too-wide")
    assert wide["placed"] is not None                     # as soon as 4 nodes are free, any blocks
    assert result.summary().required_met < 1.0


def test_summary_figures():
    summary = simulate("tas").summary()
    assert (summary.workloads, summary.placed, summary.never_placed) == (6, 5, 1)
    assert summary.mean_wait == pytest.approx((0 + 0 + 20 + 20 + 0) / 5)
    assert summary.makespan == 100
    # 56 usable GPUs (n8 tainted) over 100 s; busy 4 GPUs all along + every job's GPU-seconds
    used = 4 * 100 + 24 * 100 + 24 * 30 + 4 * 5 + 8 * 10 + 24 * 10
    assert summary.gpu_utilization == pytest.approx(used / (56 * 100))
    # someone waits over [30, 60) (single 30..50, serve 40..60): busy 4 + train 24, plus second 24 until
    # 50, small 4 over [45, 50), single 8 over [50, 60)
    waiting = 4 * 30 + 24 * 30 + 24 * 20 + 4 * 5 + 8 * 10
    assert summary.contended_utilization == pytest.approx(waiting / (56 * 30))
    assert summary.levels == ["zone", "block", "rack"]
    assert summary.job_spans[1] == 1.0                    # every multi-pod job in one block
    assert summary.required_met == 1.0 and summary.preferred_met is None
    assert summary.attempts >= 6


def test_submission_order_follows_arrival_times():
    lines = Path(TRACE).read_text().splitlines()
    shuffled = [lines[i] for i in (5, 2, 0, 4, 1, 3)]
    result = simulate("tas", parse_trace(shuffled))
    assert {r["workload"]: (r["placed"], r["finished"]) for r in result.results()} == EXPECTED
    assert [r["submitted"] for r in result.results()] == [0, 10, 20, 30, 40, 45]


def test_pending_workload_does_not_block_smaller_ones():
    # a job of 7 pods (more than the cluster ever holds) queued first; a 1-pod job behind it starts at once
    def job(name, pods):
        return {"at": 0, "duration": 10, "workload": {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": pods, "completions": pods, "template": {"spec": {"containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}}
    trace = [json.dumps(job("big", 7)), json.dumps(job("tiny", 1))]
    results = simulate("tas", parse_trace(trace)).results()
    assert [(r["workload"], r["placed"]) for r in results] == [("default/big", None), ("default/tiny", 0)]


def test_elastic_pods_are_placed_at_admission_if_they_fit():
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "elastic", "annotations": {"kai.scheduler/batch-min-member": "2"}},
           "spec": {"parallelism": 8, "completions": 8, "completionMode": "Indexed",
                    "template": {"spec": {"containers": [
                        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}
    for policy in ("tas", "kueue-bestfit", "gang-most-free"):
        (result,) = simulate(policy, parse_trace([json.dumps({"at": 0, "duration": 5, "workload": job})])).results()
        assert result["placed"] == 0 and len(result["pods"]) == 6, policy   # 6 pods of 8 GPUs fit


def _job(name: str, pods: int, annotations: dict | None = None, template_annotations: dict | None = None) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "team", "annotations": annotations or {}},
            "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                     "template": {"metadata": {"annotations": template_annotations or {}},
                                  "spec": {"containers": [
                                      {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}


def _trace(*jobs: dict) -> list:
    return parse_trace([json.dumps({"at": i, "duration": 5, "workload": job}) for i, job in enumerate(jobs)])


def test_an_invalid_workload_is_never_placed_and_the_others_are_simulated():
    bad = _job("bad", 1, {"kai.scheduler/topology": "default", "kai.scheduler/topology-required-placement": "galaxy"})
    results = simulate("tas", _trace(_job("before", 1), bad, _job("after", 1))).results()
    by_name = {r["workload"]: r for r in results}
    assert by_name["team/before"]["placed"] == 0 and by_name["team/after"]["placed"] == 2
    assert by_name["team/bad"]["placed"] is None and by_name["team/bad"]["pods"] == []
    reason = by_name["team/bad"]["reason"]
    assert reason.startswith("trace line 2: ") and "Job team/bad" in reason
    assert "kai.scheduler/topology-required-placement" in reason and "unknown level 'galaxy'" in reason


def test_a_workload_whose_pod_template_the_planner_cannot_read_is_never_placed_not_fatal():
    bad = _job("bad", 1)
    bad["spec"]["template"]["spec"]["tolerations"] = "x"
    by_name = {r["workload"]: r for r in simulate("tas", _trace(bad, _job("after", 1))).results()}
    assert by_name["team/after"]["placed"] == 1 and by_name["team/bad"]["placed"] is None
    assert by_name["team/bad"]["reason"] == ("trace line 1: Job team/bad: spec.tolerations='x' is invalid; "
                                             "expected a list of objects (key, operator, ...)")


def test_segment_size_above_the_replicas_is_simulated_as_one_short_segment():
    short = _job("short", 2, {"kai.scheduler/topology": "default"}, {"kai.scheduler/segment-size": "4"})
    (result,) = simulate("tas", _trace(short)).results()
    assert result["placed"] == 0 and len(result["pods"]) == 2


def test_cli_an_invalid_workload_is_reported_not_fatal(tmp_path, capsys):
    bad = _job("bad", 1, {"kai.scheduler/topology": "default", "kai.scheduler/topology-required-placement": "galaxy"})
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(json.dumps({"at": i, "duration": 5, "workload": job})
                               for i, job in enumerate([bad, _job("fine", 1)])) + "\n")
    out = tmp_path / "r.jsonl"
    code = main(["simulate", "--cluster", CLUSTER, "--trace", str(trace), "--out", str(out)])
    assert code == 0
    results = {r["workload"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert results["team/fine"]["placed"] == 1
    assert results["team/bad"]["placed"] is None and "trace line 1" in results["team/bad"]["reason"]


def test_utilization_integrates_the_timeline():
    timeline = [(0, 10), (5, 20), (10, 0)]
    assert utilization(timeline, 0, 10, 20) == pytest.approx((10 * 5 + 20 * 5) / 200)
    assert utilization(timeline, 0, 20, 20) == pytest.approx((10 * 5 + 20 * 5) / 400)
    assert utilization([], 0, 10, 20) == 0.0


def test_contended_utilization_counts_only_while_someone_waits():
    timeline = [(0, 10), (5, 20), (10, 0)]
    # waiting over [2, 4) and [3, 7): merged [2, 7): 10 GPUs for 3 s, 20 GPUs for 2 s
    assert contended(timeline, [(2, 4), (3, 7), (8, 8)], 20) == pytest.approx((10 * 3 + 20 * 2) / (20 * 5))
    assert contended(timeline, [(1, 1)], 20) is None


# --- the command ------------------------------------------------------------------------------------------

def test_cli_writes_results_and_prints_the_summary(tmp_path, capsys):
    out = tmp_path / "result.jsonl"
    code = main(["simulate", "--cluster", CLUSTER, "--trace", TRACE, "--out", str(out),
                 "--policy", "kueue-bestfit", "--summary"])
    stdout, stderr = capsys.readouterr()
    assert code == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["workload"]: (r["placed"], r["finished"]) for r in lines} == EXPECTED
    assert "kueue-bestfit" in stdout and "workloads placed" in stdout and "5 / 6" in stdout
    assert stderr == ""                                    # no progress bar when not a terminal


def test_cli_summary_goes_to_stderr_by_default(tmp_path, capsys):
    code = main(["simulate", "--cluster", CLUSTER, "--trace", TRACE, "--out", str(tmp_path / "r.jsonl")])
    stdout, stderr = capsys.readouterr()
    assert code == 0 and stdout == "" and "workloads placed" in stderr and "tas" in stderr


def test_cli_invalid_policy_lists_the_valid_ones(tmp_path, capsys):
    code = main(["simulate", "--cluster", CLUSTER, "--trace", TRACE, "--out", str(tmp_path / "r.jsonl"),
                 "--policy", "random"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown policy 'random'; valid policies: tas, gang-most-free, kueue-bestfit" in err
    assert not (tmp_path / "r.jsonl").exists()


def test_cli_bad_trace_names_the_line(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(Path(TRACE).read_text().splitlines()[0] + "\n{\"at\": 1}\n")
    code = main(["simulate", "--cluster", CLUSTER, "--trace", str(trace), "--out", str(tmp_path / "r.jsonl")])
    assert code == 2 and "line 2: missing field 'duration'" in capsys.readouterr().err


def test_progress_bar_only_on_a_terminal():
    plain = io.StringIO()
    bar = ProgressBar(plain)
    bar(1, 2, 30.0)
    bar.close()
    assert plain.getvalue() == ""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    bar = ProgressBar(terminal, width=10)
    bar(1, 2, 30.0)
    bar.close()
    assert terminal.getvalue() == "\rsimulate [#####-----] 1/2 workloads, t=30 s \n"


def test_simulation_leaves_no_reservations_behind():
    result = simulate("tas")
    assert result.cluster.reservations == {}
    assert np.array_equal(result.cluster.free, load_cluster(CLUSTER).free)


def _with_line(line: dict) -> list:
    return read_trace(TRACE) + parse_trace([json.dumps(line)], source="extra")


def test_a_workload_that_can_never_fit_is_planned_once_and_says_so():
    """Five pods of 8 GPUs in one block: no block has 5 nodes even when empty. It used to be planned
    again after every completion; one attempt settles it."""
    wide = json.loads(Path(TRACE).read_text().splitlines()[1])
    wide["workload"]["metadata"]["name"] = "five-wide"
    wide["workload"]["spec"]["parallelism"] = wide["workload"]["spec"]["completions"] = 5
    result = simulate("tas", _with_line(wide))
    job = next(job for job in result.jobs if job.key == "team/five-wide")
    assert job.attempts == 1 and job.placed is None
    assert job.reason.startswith("can never fit in this cluster")


@pytest.mark.parametrize("policy", ["tas", "kueue-bestfit", "gang-most-free"])
def test_refused_workloads_are_not_planned_again_on_an_unchanged_view(policy):
    """A refused workload is planned again only when what its policy decides from has changed: the
    results are exactly those of planning it after every completion, with fewer plans."""
    import random
    import sys
    sys.path.insert(0, str(paths.BENCHMARKS))
    from quality import cluster_objects, trace_lines

    from topology.cluster import Cluster
    from topology.objects import ClusterObjects

    rng = random.Random(3)
    objects = cluster_objects(rng)
    entries = parse_trace(trace_lines(rng, 80, 1800))
    runs = []
    for cached in (True, False):
        chosen = get_policy(policy)
        if not cached:
            views = iter(range(1 << 30))
            chosen.view = lambda cluster, gangs: str(next(views)).encode()
        cluster = Cluster.from_objects(ClusterObjects.from_objects(objects))
        result = Simulation(cluster, chosen, entries).run()
        runs.append((result.results(), sum(job.attempts for job in result.jobs)))
    (cached_results, cached_attempts), (every_results, every_attempts) = runs
    assert cached_results == every_results
    # the topology-blind policy is refused only while too few GPUs are free, which is checked first
    assert cached_attempts < every_attempts if policy != "gang-most-free" else cached_attempts <= every_attempts
