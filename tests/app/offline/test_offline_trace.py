"""Reading simulation traces: valid lines, and errors that name the line and the field."""
from __future__ import annotations

import paths
import json
from pathlib import Path

import pytest

from app.offline.trace import TraceError, parse_trace, read_trace

FIXTURES = paths.FIXTURES / "offline"
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a", "namespace": "ns"},
       "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}


def line(**fields) -> str:
    return json.dumps(fields)


def test_fixture_trace_reads_in_file_order():
    entries = read_trace(FIXTURES / "trace.jsonl")
    assert [e.key for e in entries] == ["team/train", "team/too-wide", "team/second", "team/single",
                                        "team/serve", "team/small"]
    assert [e.at for e in entries] == [0, 10, 20, 30, 40, 45]
    assert entries[0].duration == 100 and entries[0].line == 1
    assert entries[0].workload["kind"] == "PyTorchJob"


def test_blank_lines_are_skipped_and_line_numbers_kept():
    entries = parse_trace(["", line(at=5, duration=1, workload=JOB), "   "])
    assert len(entries) == 1 and entries[0].line == 2


def test_namespace_defaults_in_the_key():
    job = {**JOB, "metadata": {"name": "b"}}
    assert parse_trace([line(at=0, duration=1, workload=job)])[0].key == "default/b"


@pytest.mark.parametrize("text, expected", [
    ("{not json", "line 2: not valid JSON"),
    ("[1, 2]", "line 2: expected an object with fields at, duration, workload"),
    (line(duration=1, workload=JOB), "line 2: missing field 'at'"),
    (line(at=0, workload=JOB), "line 2: missing field 'duration'"),
    (line(at="soon", duration=1, workload=JOB), "line 2: field 'at' must be a number of seconds, got str"),
    (line(at=True, duration=1, workload=JOB), "field 'at' must be a number of seconds"),
    (line(at=-1, duration=1, workload=JOB), "line 2: field 'at' must be >= 0, got -1"),
    (line(at=0, duration=0, workload=JOB), "line 2: field 'duration' must be > 0, got 0"),
    (line(at=1e308, duration=1, workload=JOB), "line 2: field 'at' must be at most 1e+09 seconds (about 31 years), got 1e+308"),
    (line(at=0, duration=1e308, workload=JOB), "field 'duration' must be at most 1e+09 seconds"),
    (line(at=0, duration=1, workload="job.yaml"), "line 2: field 'workload' must be a workload manifest"),
    (line(at=0, duration=1), "field 'workload' must be a workload manifest (an object), got null"),
    (line(at=0, duration=1, workload={**JOB, "kind": ""}), "line 2: field 'workload.kind' is required"),
    (line(at=0, duration=1, workload={"apiVersion": "batch/v1", "kind": "Job"}),
     "line 2: field 'workload.metadata.name' is required"),
    (line(at=0, duration=1, workload=JOB, priority=3), "line 2: unknown field 'priority'; valid fields"),
])
def test_errors_name_the_line_and_field(text, expected):
    first = line(at=0, duration=1, workload={**JOB, "metadata": {"name": "first"}})
    with pytest.raises(TraceError) as err:
        parse_trace([first, text], source="t.jsonl")
    assert expected in str(err.value)
    assert str(err.value).startswith("t.jsonl line 2")


def test_repeated_workload_names_are_an_error():
    with pytest.raises(TraceError, match="line 3: workload ns/a repeats the name used on line 1"):
        parse_trace([line(at=0, duration=1, workload=JOB), "", line(at=1, duration=1, workload=JOB)])


def test_unreadable_file(tmp_path):
    with pytest.raises(TraceError, match="cannot read trace file .*missing.jsonl"):
        read_trace(tmp_path / "missing.jsonl")
