"""The quality benchmark's per-seed comparison (benchmarks/quality.py --seeds): what it compares and how."""
import paths
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(paths.BENCHMARKS))

from quality import SEED_COLUMNS, SeedFigures, _at_least, _difference, _versus, main, seeds_table  # noqa: E402

BASE = SeedFigures(utilization=0.643, wait=21.2, wait_same_end=54.4, makespan=13.2, blocks_per_job=1.67,
                   racks_per_job=2.77, racks_per_segment=1.47, preferred_met=75)


def test_higher_utilization_and_lower_wait_are_better():
    assert _at_least(replace(BASE, utilization=0.70), BASE, "utilization")
    assert not _at_least(replace(BASE, utilization=0.60), BASE, "utilization")
    assert _at_least(replace(BASE, wait=20.0), BASE, "wait")
    assert not _at_least(replace(BASE, wait=25.0), BASE, "wait")
    assert _at_least(replace(BASE, blocks_per_job=1.5), BASE, "blocks_per_job")
    assert not _at_least(replace(BASE, preferred_met=70), BASE, "preferred_met")


def test_figures_are_compared_unrounded():
    # 64.31% and 64.34% both print as 64.3%, but tas is behind; an exact tie matches
    assert not _at_least(replace(BASE, utilization=0.6431), replace(BASE, utilization=0.6434), "utilization")
    assert _at_least(BASE, BASE, "utilization")
    assert _versus(BASE, replace(BASE, wait=30.0), ("mean wait", "wait", "{:.1f} min", False)) == \
        "**21.2 min vs 30.0 min**"
    assert _versus(BASE, replace(BASE, wait=3.0), ("mean wait", "wait", "{:.1f} min", False)) == \
        "21.2 min vs 3.0 min"


def test_seeds_table_has_a_row_a_seed_the_means_and_the_verdict():
    text = seeds_table(range(1, 3), jobs=30, no_exclusive=False)
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[0] for row in rows[1:]] == ["| 1", "| 2", "| **mean of 1-2**",
                                                        "| tas - kueue-bestfit, mean ± standard error"]
    verdict = next(line for line in text.splitlines() if line.startswith("over the means"))
    for figure in ("GPU utilization", "mean wait", "blocks per job", "racks per segment", "preferred met"):
        assert f"{figure}" in verdict
    assert verdict.count(" yes") + verdict.count(" NO") == 5
    # the means row is the mean of the seeds' rows (utilization, first column)
    shares = [float(row.split(" | ")[1].strip("*").split("%")[0]) for row in rows[1:]]
    assert abs(shares[2] - (shares[0] + shares[1]) / 2) <= 0.1


def test_a_seed_without_multi_pod_segments_shows_a_dash_and_no_verdict_for_them():
    # two jobs on seed 3: neither run places a multi-pod segment, so there are no racks per segment
    text = seeds_table(range(3, 4), jobs=2, no_exclusive=False)
    assert "| - vs - |" in text
    assert "racks per segment n/a" in text


@pytest.mark.parametrize("flag, value, message", [("--jobs", "0", "must be at least 1"),
                                                  ("--jobs", "x", "expected a whole number of jobs"),
                                                  ("--workers", "0", "must be at least 1")])
def test_a_bad_count_is_refused_naming_the_flag(flag, value, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--seeds", "1", flag, value])
    assert exit_.value.code == 2
    assert f"argument {flag}: {value!r}: {message}" in capsys.readouterr().err


def test_processes_sharing_the_seeds_print_the_same_table():
    assert seeds_table(range(1, 4), jobs=30, no_exclusive=False, workers=2) == \
        seeds_table(range(1, 4), jobs=30, no_exclusive=False)


def test_the_paired_difference_has_its_standard_error():
    wait = next(column for column in SEED_COLUMNS if column[1] == "wait")
    ours = [replace(BASE, wait=w) for w in (20.0, 22.0, 30.0)]
    theirs = [replace(BASE, wait=w) for w in (21.0, 24.0, 28.0)]
    # gaps -1, -2, +2: mean -0.33, standard deviation 2.08, error 2.08 / sqrt(3) = 1.20 (one more decimal)
    assert _difference(ours, theirs, wait) == "-0.33 min ± 1.20 min"
    assert _difference(ours[:1], theirs[:1], wait) == "-"          # one seed has no spread to measure
