"""Properties of segments through the public API: a partition of the indexes, sizes, the clamp rule."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from grouper import expand_pods, group_workload, identify_pod
from grouper.segments import segment_min


def _job(replicas: int, size: int, minimum: int | None) -> dict:
    annotations = {"kai.scheduler/topology": "default"}
    if minimum is not None:
        annotations["kai.scheduler/batch-min-member"] = str(minimum)
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "prop", "namespace": "ns", "uid": "u", "annotations": annotations},
            "spec": {"completionMode": "Indexed", "parallelism": replicas, "completions": replicas,
                     "template": {"metadata": {"annotations": {"kai.scheduler/segment-size": str(size)}},
                                  "spec": {"containers": []}}}}


@st.composite
def shapes(draw):
    replicas = draw(st.integers(1, 120))
    size = draw(st.integers(1, replicas))
    minimum = draw(st.none() | st.integers(1, replicas))
    return replicas, size, minimum


@settings(max_examples=150, deadline=None)
@given(shapes())
def test_segments_partition_the_indexes(shape):
    replicas, size, minimum = shape
    [tree] = group_workload(_job(replicas, size, minimum))
    segments = tree.group("job").children
    assert len(segments) == -(-replicas // size)
    indexes = [slot.index for segment in segments for slot in segment.slots]
    assert indexes == list(range(replicas))                      # each index exactly once, in order
    assert all(len(s.slots) == size for s in segments[:-1])
    assert 1 <= len(segments[-1].slots) <= size
    for i, segment in enumerate(segments):
        assert segment.name == f"job-{i}"
        assert (segment.segment.index, segment.segment.size, segment.segment.count) == (i, size, len(segments))
        assert all(slot.index // size == i for slot in segment.slots)


@settings(max_examples=150, deadline=None)
@given(shapes())
def test_segment_minimums_follow_the_clamp_rule(shape):
    replicas, size, minimum = shape
    [tree] = group_workload(_job(replicas, size, minimum))
    segments = tree.group("job").children
    required = [s.leaf_min() for s in segments]
    target = replicas if minimum is None else minimum
    assert sum(required) == target
    for i, segment in enumerate(segments):
        assert required[i] == max(0, min(target - i * size, len(segment.slots)))
    # required pods are a prefix: full segments first, then at most one partial, then elastic ones
    assert required == sorted(required, reverse=True)


@settings(max_examples=60, deadline=None)
@given(shapes())
def test_identity_rank_and_segment_match_the_index(shape):
    replicas, size, _ = shape
    job = _job(replicas, size, None)
    for pod in expand_pods(job):
        identity = identify_pod(pod, job)
        index = identity.slot.index
        assert identity.segment.index == index // size and identity.rank == index % size
        assert identity.subgroup == f"job-{index // size}"


def test_segment_min_examples():
    # M=12, S=4, R=20: segments 0-2 require 4, 3-4 require 0
    assert [segment_min(12, i, 4, 4) for i in range(5)] == [4, 4, 4, 0, 0]
    assert [segment_min(10, i, 4, 4) for i in range(5)] == [4, 4, 2, 0, 0]
    assert segment_min(20, 4, 4, 2) == 2
