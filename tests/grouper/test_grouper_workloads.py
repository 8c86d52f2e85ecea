"""group_workload: kinds, segments, elasticity, aliases and annotation errors."""
from __future__ import annotations

import pytest

from grouper import GroupingError, group_workload, opts_in, podgroup_name
from topology.groups import SegmentInfo, Slot

from grouper_helpers import demo_topologies, workload

TOPOLOGIES = demo_topologies()


def _tfjob():
    return workload("tfjob-segments.yaml")


def _worker_annotations(job):
    return job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]


# --- the 16-worker TFJob ----------------------------------------------------------------------------

def test_tfjob_16_workers_in_4_rack_segments_inside_one_zone():
    [tree] = group_workload(_tfjob(), TOPOLOGIES)
    assert tree.name == "pg-tf-segments-7d1c0a52-2f55-4c1e-9a51-0b5f1e0c0001"
    assert tree.key == f"research/{tree.name}"
    assert tree.kind == "TFJob" and tree.topology == "default"
    assert tree.root.required_level == "zone" and tree.root.min_member is None
    assert [g.name for g in tree.root.children] == ["chief", "ps", "worker"]
    worker = tree.group("worker")
    assert [g.name for g in worker.children] == ["worker-0", "worker-1", "worker-2", "worker-3"]
    for i, segment in enumerate(worker.children):
        assert segment.required_level == "rack"
        assert segment.segment == SegmentInfo("worker", i, 4, 4)
        assert segment.slots == [Slot("worker", 4 * i + k) for k in range(4)]
        assert segment.min_member is None
    # Chief and PS are unsegmented leaves named after the role
    assert tree.group("chief").is_leaf and tree.group("chief").slots == [Slot("chief", 0)]
    assert tree.group("ps").slots == [Slot("ps", 0), Slot("ps", 1)]
    assert tree.group("ps").segment is None and tree.group("ps").required_level is None
    assert len(tree.slots()) == 19
    assert {name: spec.replicas for name, spec in tree.roles.items()} == {"chief": 1, "ps": 2, "worker": 16}
    requests = tree.roles["worker"].pod_spec["containers"][0]["resources"]["requests"]
    assert requests["nvidia.com/gpu"] == "2"
    assert tree.warnings == []


def test_segment_size_that_does_not_divide_leaves_a_smaller_last_segment():
    job = _tfjob()
    _worker_annotations(job)["kai.scheduler/segment-size"] = "5"
    [tree] = group_workload(job)
    sizes = [len(g.slots) for g in tree.group("worker").children]
    assert sizes == [5, 5, 5, 1]
    assert tree.group("worker-3").segment == SegmentInfo("worker", 3, 5, 4)


# --- elasticity -------------------------------------------------------------------------------------

def test_elastic_pytorchjob_m12_r20_s4():
    [tree] = group_workload(workload("pytorchjob-elastic.yaml"), TOPOLOGIES)
    worker = tree.group("worker")
    assert worker.min_member == 12
    assert [g.min_member for g in worker.children] == [4, 4, 4, 0, 0]
    assert [g.leaf_min() for g in worker.children] == [4, 4, 4, 0, 0]
    assert tree.group("master").min_member is None
    assert tree.root.min_member == 13
    assert tree.root.preferred_level == "block"


@pytest.mark.parametrize("min_available, expected", [
    (11, [4, 4, 2, 0, 0]),     # the segment straddling M needs only the pods below M
    (21, [None] * 5),          # everything required
    (1, [0, 0, 0, 0, 0]),      # only the master is required
])
def test_elastic_clamp_rule(min_available, expected):
    job = workload("pytorchjob-elastic.yaml")
    job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] = min_available
    [tree] = group_workload(job)
    assert [g.min_member for g in tree.group("worker").children] == expected


def test_job_batch_min_member():
    [tree] = group_workload(workload("job-indexed.yaml"), TOPOLOGIES)
    assert [g.name for g in tree.group("job").children] == ["job-0", "job-1"]
    assert [g.min_member for g in tree.group("job").children] == [4, 0]
    assert tree.root.required_level == "block"
    assert tree.strategy == "binpack"


@pytest.mark.parametrize("value", ["0", "9", "four"])
def test_batch_min_member_out_of_range(value):
    job = workload("job-indexed.yaml")
    job["metadata"]["annotations"]["kai.scheduler/batch-min-member"] = value
    with pytest.raises(GroupingError, match=r"Job research/sweep: annotation kai.scheduler/batch-min-member="
                                            rf"'{value}' is invalid; expected an integer from 1 to 8"):
        group_workload(job)


def test_min_available_larger_than_the_job():
    job = workload("pytorchjob-elastic.yaml")
    job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] = 22
    with pytest.raises(GroupingError, match=r"spec.runPolicy.schedulingPolicy.minAvailable=22 is invalid.*1 to 21"):
        group_workload(job)


def test_pytorch_elastic_policy_min_replicas():
    job = workload("pytorchjob-elastic.yaml")
    del job["spec"]["runPolicy"]
    job["spec"]["elasticPolicy"] = {"minReplicas": 8, "maxReplicas": 20}
    [tree] = group_workload(job)
    assert [g.min_member for g in tree.group("worker").children] == [4, 4, 0, 0, 0]
    assert tree.root.min_member == 9


# --- LeaderWorkerSet --------------------------------------------------------------------------------

def test_lws_size_9_one_leader_segments_of_4():
    trees = group_workload(workload("lws-segments.yaml"), TOPOLOGIES)
    assert [t.name for t in trees] == ["pg-vllm-0-0b6a2d7e-3c1f-49a1-b2f0-6e7d8c9a0003",
                                       "pg-vllm-1-0b6a2d7e-3c1f-49a1-b2f0-6e7d8c9a0003"]
    for tree in trees:
        assert tree.root.required_level == "network.example.com/block" and tree.root.exclusive
        segments = tree.group("worker").children
        assert [g.name for g in segments] == ["worker-0", "worker-1"]
        # upstream subgroups: the leader and worker-index 1..4 -> segment 0, 5..8 -> segment 1
        assert segments[0].slots == [Slot("leader", 0)] + [Slot("worker", i) for i in (1, 2, 3, 4)]
        assert segments[1].slots == [Slot("worker", i) for i in (5, 6, 7, 8)]
        assert all(g.exclusive and g.required_level == "network.example.com/rack" for g in segments)
        assert segments[1].segment == SegmentInfo("worker", 1, 4, 2)
        assert tree.roles["worker"].replicas == 8 and tree.roles["leader"].replicas == 1
        assert tree.roles["leader"].pod_spec["containers"][0]["name"] == "vllm-leader"


def test_lws_leader_excluded_from_subgroups_is_its_own_group():
    lws = workload("lws-segments.yaml")
    lws["spec"]["leaderWorkerTemplate"]["subGroupPolicy"]["subGroupType"] = "LeaderExcluded"
    [tree, _] = group_workload(lws, TOPOLOGIES)
    assert [g.name for g in tree.root.children] == ["leader", "worker"]
    assert tree.group("leader").slots == [Slot("leader", 0)]
    segments = tree.group("worker").children
    assert [[slot.index for slot in g.slots] for g in segments] == [[1, 2, 3, 4], [5, 6, 7, 8]]


def test_lws_without_leader_template_uses_the_worker_template():
    lws = workload("lws-segments.yaml")
    del lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    trees = group_workload(lws)
    assert trees[0].roles["leader"].pod_spec["containers"][0]["name"] == "vllm-worker"


def test_lws_subgroup_exclusive_without_size_is_refused():
    lws = workload("lws-segments.yaml")
    del lws["spec"]["leaderWorkerTemplate"]["subGroupPolicy"]
    with pytest.raises(GroupingError) as err:
        group_workload(lws, TOPOLOGIES)
    assert ("annotation leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology='network.example.com/rack' "
            "needs a segment size: set spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize") in str(err.value)


@pytest.mark.parametrize("level, size", [
    ("kai.scheduler/segment-topology-required-placement", "kai.scheduler/segment-size"),
    ("kai.scheduler/segment-topology-preferred-placement", "kai.scheduler/segment-size"),
    ("kueue.x-k8s.io/podset-slice-required-topology", "kueue.x-k8s.io/podset-slice-size"),
])
def test_segment_level_without_a_size_is_refused_naming_both_annotations(level, size):
    job = _tfjob()
    annotations = _worker_annotations(job)
    for key in list(annotations):
        if "segment" in key:
            del annotations[key]
    annotations[level] = "rack"
    with pytest.raises(GroupingError) as err:
        group_workload(job, TOPOLOGIES)
    message = str(err.value)
    assert f"annotation {level}='rack' on spec.tfReplicaSpecs.Worker needs a segment size" in message
    assert f"set annotation {size}" in message


# --- opting in, names, strategy, priority -----------------------------------------------------------

def test_workload_without_annotations_is_not_a_gang():
    job = _tfjob()
    del job["metadata"]["annotations"]
    del job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]
    assert not opts_in(job)
    assert group_workload(job) == []


def test_podgroup_name_without_uid():
    job = _tfjob()
    del job["metadata"]["uid"]
    assert podgroup_name(job) == "pg-tf-segments"
    assert podgroup_name(job, 3) == "pg-tf-segments-3"


def test_strategy_override_and_invalid_value():
    job = _tfjob()
    job["metadata"]["annotations"]["kai.scheduler/placement-strategy"] = "spread"
    assert group_workload(job)[0].strategy == "spread"
    job["metadata"]["annotations"]["kai.scheduler/placement-strategy"] = "random"
    with pytest.raises(GroupingError, match=r"kai.scheduler/placement-strategy='random' is invalid; "
                                            r"valid values: binpack, spread"):
        group_workload(job)


def test_priority_and_preemption_policy_come_from_the_template():
    job = _tfjob()
    spec = job["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]
    spec["priority"] = 1000
    spec["preemptionPolicy"] = "Never"
    [tree] = group_workload(job)
    assert tree.priority == 1000 and tree.preemption_policy == "Never"


# --- topology names and level validation ------------------------------------------------------------

def test_template_topology_wins_over_the_root():
    job = _tfjob()
    job["metadata"]["annotations"]["kai.scheduler/topology"] = "other"
    _worker_annotations(job)["kai.scheduler/topology"] = "default"
    assert group_workload(job, TOPOLOGIES)[0].topology == "default"


def test_templates_naming_different_topologies():
    job = _tfjob()
    _worker_annotations(job)["kai.scheduler/topology"] = "default"
    job["spec"]["tfReplicaSpecs"]["PS"]["template"]["metadata"] = {
        "annotations": {"kai.scheduler/topology": "kueue-default"}}
    with pytest.raises(GroupingError, match="kai.scheduler/topology differs between pod templates"):
        group_workload(job)


def test_segment_levels_without_topology_resolve_in_the_one_topology_that_has_them_with_a_warning():
    """KAI drops them silently; the one demo topology with KAI's level names keeps the segments."""
    job = _tfjob()
    with_topology = group_workload(job, TOPOLOGIES)[0]
    del job["metadata"]["annotations"]["kai.scheduler/topology"]
    [tree] = group_workload(job, TOPOLOGIES)
    assert tree.topology == with_topology.topology == "default"
    assert [g.name for g in tree.groups()] == [g.name for g in with_topology.groups()]
    assert not tree.group("worker").is_leaf
    [warning] = tree.warnings
    assert "no kai.scheduler/topology" in warning and "resolved in topology 'default'" in warning


@pytest.mark.parametrize("level", ["galaxy", "network.example.com/rack"])
def test_a_required_level_without_topology_that_no_or_several_topologies_have_refuses_the_gang(level):
    """A hard constraint is never dropped: galaxy is in no topology, the rack label in both demo topologies."""
    job = _tfjob()
    del job["metadata"]["annotations"]["kai.scheduler/topology"]
    for role in job["spec"]["tfReplicaSpecs"].values():
        role["template"].setdefault("metadata", {})["annotations"] = {}
    job["metadata"]["annotations"]["kai.scheduler/topology-required-placement"] = level
    why = "no topology has it" if level == "galaxy" else "topologies default, kueue-default all have it"
    with pytest.raises(GroupingError, match=f"'{level}' is a required level without kai.scheduler/topology, "
                                            f"and {why}; set kai.scheduler/topology"):
        group_workload(job, TOPOLOGIES)


def test_unknown_topology():
    job = _tfjob()
    job["metadata"]["annotations"]["kai.scheduler/topology"] = "fabric"
    with pytest.raises(GroupingError, match=r"annotation kai.scheduler/topology='fabric' names an unknown "
                                            r"topology; valid topologies: default, kueue-default"):
        group_workload(job, TOPOLOGIES)


def test_unknown_segment_level_names_the_annotation_and_valid_levels():
    job = _tfjob()
    _worker_annotations(job)["kai.scheduler/segment-topology-required-placement"] = "row"
    with pytest.raises(GroupingError) as err:
        group_workload(job, TOPOLOGIES)
    message = str(err.value)
    assert "TFJob research/tf-segments" in message
    assert "annotation kai.scheduler/segment-topology-required-placement='row' on spec.tfReplicaSpecs.Worker" in message
    assert "zone" in message and "rack" in message and "network.example.com/rack" in message


def test_unknown_levels_pass_without_topologies():
    job = _tfjob()
    _worker_annotations(job)["kai.scheduler/segment-topology-required-placement"] = "row"
    assert group_workload(job)[0].group("worker-0").required_level == "row"


def test_segment_level_coarser_than_the_required_level():
    job = _tfjob()
    job["metadata"]["annotations"]["kai.scheduler/topology-required-placement"] = "rack"
    _worker_annotations(job)["kai.scheduler/segment-topology-required-placement"] = "zone"
    with pytest.raises(GroupingError, match=r"segment-topology-required-placement='zone' on spec.tfReplicaSpecs.Worker "
                                            r"is coarser than the workload's required level "
                                            r"annotation kai.scheduler/topology-required-placement='rack'"):
        group_workload(job, TOPOLOGIES)


def test_segment_level_equal_to_the_required_level_is_fine():
    job = _tfjob()
    _worker_annotations(job)["kai.scheduler/segment-topology-required-placement"] = "zone"
    assert group_workload(job, TOPOLOGIES)[0].group("worker-0").required_level == "zone"


@pytest.mark.parametrize("value", ["0", "-4", "four", "2.5", "1_0", "٤"])   # Go's Atoi: no "_", only 0-9
def test_invalid_segment_size(value):
    job = _tfjob()
    _worker_annotations(job)["kai.scheduler/segment-size"] = value
    with pytest.raises(GroupingError) as err:
        group_workload(job)
    assert (f"annotation kai.scheduler/segment-size={value!r} on spec.tfReplicaSpecs.Worker is invalid; "
            f"expected an integer >= 1 (pods per segment; the worker replicas are 16)") in str(err.value)


def test_segment_size_equal_to_replicas_is_one_segment():
    job = _tfjob()
    _worker_annotations(job)["kai.scheduler/segment-size"] = "16"
    [tree] = group_workload(job)
    assert [g.name for g in tree.group("worker").children] == ["worker-0"]


# --- Kueue aliases ----------------------------------------------------------------------------------

def _kueue_job():
    job = workload("job-indexed.yaml")
    job["metadata"]["annotations"] = {}
    job["spec"]["template"]["metadata"]["annotations"] = {
        "kueue.x-k8s.io/podset-required-topology": "network.example.com/block",
        "kueue.x-k8s.io/podset-slice-required-topology": "network.example.com/rack",
        "kueue.x-k8s.io/podset-slice-size": "2",
    }
    return job


def test_kueue_podset_annotations_are_aliases():
    [tree] = group_workload(_kueue_job(), TOPOLOGIES)
    assert tree.topology == "kueue-default"   # the Kueue topology holding both labels is preferred
    job_group = tree.group("job")
    assert job_group.required_level == "network.example.com/block"
    assert [g.name for g in job_group.children] == ["job-0", "job-1", "job-2", "job-3"]
    assert all(g.required_level == "network.example.com/rack" for g in job_group.children)
    assert job_group.children[0].segment == SegmentInfo("job", 0, 2, 4)


def test_kueue_preferred_alias():
    job = _kueue_job()
    job["spec"]["template"]["metadata"]["annotations"] = {
        "kueue.x-k8s.io/podset-preferred-topology": "network.example.com/rack"}
    [tree] = group_workload(job, TOPOLOGIES)
    assert tree.group("job").preferred_level == "network.example.com/rack"


def test_kueue_level_in_no_topology():
    job = _kueue_job()
    job["spec"]["template"]["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] = "cloud/pod"
    with pytest.raises(GroupingError, match=r"no topology has every level of annotation "
                                            r"kueue.x-k8s.io/podset-required-topology='cloud/pod' on spec.template"):
        group_workload(job, TOPOLOGIES)


def test_kueue_slice_coarser_than_podset_level():
    job = _kueue_job()
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    annotations["kueue.x-k8s.io/podset-required-topology"] = "network.example.com/rack"
    annotations["kueue.x-k8s.io/podset-slice-required-topology"] = "network.example.com/block"
    with pytest.raises(GroupingError, match="is coarser than the job required level"):
        group_workload(job, TOPOLOGIES)


# --- other kinds ------------------------------------------------------------------------------------

def _statefulset(index_label: str | None):
    annotations = {"kai.scheduler/topology": "default", "kai.scheduler/segment-size": "2",
                   "kai.scheduler/segment-topology-required-placement": "rack"}
    if index_label:
        annotations["kai.scheduler/pod-index-label"] = index_label
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "cache", "namespace": "serving", "uid": "u1"},
            "spec": {"replicas": 4, "template": {"metadata": {"annotations": annotations},
                                                  "spec": {"containers": [{"name": "c", "image": "redis"}]}}}}


def test_custom_kind_with_pod_index_label_segments():
    [tree] = group_workload(_statefulset("apps.kubernetes.io/pod-index"), TOPOLOGIES)
    assert [g.name for g in tree.group("statefulset").children] == ["statefulset-0", "statefulset-1"]
    assert tree.group("statefulset-1").slots == [Slot("statefulset", 2), Slot("statefulset", 3)]


def test_custom_kind_without_pod_index_label_ignores_segments_with_a_warning():
    [tree] = group_workload(_statefulset(None), TOPOLOGIES)
    assert tree.group("statefulset").is_leaf
    assert any("set kai.scheduler/pod-index-label" in w for w in tree.warnings)


def test_non_indexed_job_ignores_segments_with_a_warning():
    job = workload("job-indexed.yaml")
    del job["spec"]["completionMode"]
    [tree] = group_workload(job, TOPOLOGIES)
    assert tree.group("job").is_leaf
    assert any("Job pods carry no index" in w for w in tree.warnings)


def test_jobset_replicated_jobs_are_roles():
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "research", "annotations": {"kai.scheduler/topology": "default"}},
        "spec": {"replicatedJobs": [
            {"name": "driver", "replicas": 1, "template": {"spec": {"template": {"spec": {"containers": []}}}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4, "template": {
                "metadata": {"annotations": {"kai.scheduler/pod-index-label": "example.com/global-index",
                                             "kai.scheduler/segment-size": "4",
                                             "kai.scheduler/segment-topology-required-placement": "rack"}},
                "spec": {"containers": []}}}}},
        ]}}
    [tree] = group_workload(jobset, TOPOLOGIES)
    assert tree.roles["workers"].replicas == 8 and tree.group("driver").is_leaf
    assert [g.name for g in tree.group("workers").children] == ["workers-0", "workers-1"]


def test_kubeflow_without_replica_specs():
    job = _tfjob()
    job["spec"] = {}
    with pytest.raises(GroupingError, match=r"TFJob research/tf-segments: spec.tfReplicaSpecs is missing"):
        group_workload(job)


def test_bad_replicas_field():
    job = _tfjob()
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "many"
    with pytest.raises(GroupingError, match=r"spec.tfReplicaSpecs.Worker.replicas='many' is invalid"):
        group_workload(job)


def test_kueue_levels_without_topologies_keep_their_labels_with_a_warning():
    [tree] = group_workload(_kueue_job())
    assert tree.topology is None
    assert tree.group("job").required_level == "network.example.com/block"
    assert any("levels are node labels" in w for w in tree.warnings)


@pytest.mark.parametrize("kind, field, replica_types", [
    ("PyTorchJob", "pytorchReplicaSpecs", ["Master", "Worker"]),
    ("TFJob", "tfReplicaSpecs", ["Chief", "Evaluator", "Worker"]),
    ("JAXJob", "jaxReplicaSpecs", ["Worker"]),
    ("XGBoostJob", "xgbReplicaSpecs", ["Master", "Worker"]),
    ("MPIJob", "mpiReplicaSpecs", ["Launcher", "Worker"]),
])
def test_kubeflow_kinds_roles_are_replica_types_lowercased(kind, field, replica_types):
    specs = {t: {"replicas": 2 if t == "Worker" else 1, "template": {"spec": {"containers": []}}}
             for t in replica_types}
    job = {"apiVersion": "kubeflow.org/v1", "kind": kind,
           "metadata": {"name": "k", "namespace": "ns", "uid": "u",
                        "annotations": {"kai.scheduler/topology": "default"}},
           "spec": {field: specs}}
    [tree] = group_workload(job, TOPOLOGIES)
    assert [g.name for g in tree.root.children] == [t.lower() for t in replica_types]
    assert tree.group("worker").slots == [Slot("worker", 0), Slot("worker", 1)]
    assert tree.kind == kind and tree.name == "pg-k-u"


def _set(obj, path, value):
    *parents, last = path
    for key in parents:
        obj = obj[key]
    obj[last] = value


@pytest.mark.parametrize("fixture, path, field", [
    ("tfjob-segments.yaml", ("spec", "tfReplicaSpecs", "Worker"), "spec.tfReplicaSpecs.Worker="),
    ("tfjob-segments.yaml", ("spec", "tfReplicaSpecs", "Worker", "template"), "spec.tfReplicaSpecs.Worker.template="),
    ("job-indexed.yaml", ("spec", "template"), "spec.template="),
    ("lws-segments.yaml", ("spec", "leaderWorkerTemplate", "workerTemplate"),
     "spec.leaderWorkerTemplate.workerTemplate="),
    ("jobset.yaml", ("spec", "replicatedJobs", 0), r"spec.replicatedJobs\[0\]="),
    ("jobset.yaml", ("spec", "replicatedJobs", 0, "template"), r"spec.replicatedJobs\[0\].template="),
])
def test_a_malformed_spec_is_a_grouping_error_naming_the_field(fixture, path, field):
    # callers (webhook, extender) catch GroupingError: never an AttributeError on a bad object
    obj = workload(fixture)
    _set(obj, path, "oops")
    with pytest.raises(GroupingError, match=f"{field}'oops' is invalid; expected a mapping"):
        group_workload(obj, TOPOLOGIES)


# --- issue 13: LWS as its controller makes it, short segments ---------------------------------------

def _lws_worker_annotated(size: int, subgroup: int):
    """The common LWS shape: segment annotations on workerTemplate, no leaderTemplate."""
    lws = workload("lws-segments.yaml")
    template = lws["spec"]["leaderWorkerTemplate"]
    del template["leaderTemplate"], template["subGroupPolicy"]
    template["size"] = size
    template["workerTemplate"]["metadata"] = {"annotations": {
        "kai.scheduler/topology": "default", "kai.scheduler/segment-size": str(subgroup),
        "kai.scheduler/segment-topology-required-placement": "network.example.com/rack"}}
    return lws


def test_lws_segment_annotations_on_worker_template_without_leader_template_are_accepted():
    trees = group_workload(_lws_worker_annotated(4, 2), TOPOLOGIES)
    assert len(trees) == 2
    assert trees[0].group("leader").slots == [Slot("leader", 0)]


@pytest.mark.parametrize("size, subgroup, expected", [
    # index 0 is the leader, in subgroup 0 as upstream labels it
    (4, 2, [[0, 1], [2, 3]]),             # (4-1) % 2 != 0: worker i -> i // 2, the leader fills subgroup 0
    (5, 2, [[0, 1, 2], [3, 4]]),          # (5-1) % 2 == 0 and 5 % 2 != 0: worker i -> (i-1) // 2, leader extra
    (9, 4, [[0, 1, 2, 3, 4], [5, 6, 7, 8]]),
    (7, 3, [[0, 1, 2, 3], [4, 5, 6]]),
    (6, 3, [[0, 1, 2], [3, 4, 5]]),
    (3, 1, [[0], [1], [2]]),              # subgroup 0 holds only the leader
])
def test_lws_worker_segments_are_upstream_subgroups(size, subgroup, expected):
    lws = workload("lws-segments.yaml")
    lws["spec"]["leaderWorkerTemplate"]["size"] = size
    lws["spec"]["leaderWorkerTemplate"]["subGroupPolicy"]["subGroupSize"] = subgroup
    [tree, _] = group_workload(lws, TOPOLOGIES)
    segments = tree.group("worker").children
    assert [[slot.index for slot in g.slots] for g in segments] == expected


def test_segment_size_above_the_replicas_is_one_short_segment_with_a_warning():
    job = _tfjob()
    _worker_annotations(job)["kai.scheduler/segment-size"] = "20"
    [tree] = group_workload(job)
    [segment] = tree.group("worker").children
    assert len(segment.slots) == 16
    assert any("kai.scheduler/segment-size=20" in w and "one segment of 16" in w for w in tree.warnings)


@pytest.mark.parametrize("key", ["kai.scheduler/segment-size", "kai.scheduler/segment-topology-required-placement"])
def test_a_segment_annotation_on_the_job_itself_is_warned_about_naming_the_pod_template(key):
    job = workload("job-indexed.yaml")
    job["metadata"].setdefault("annotations", {})[key] = "4"
    [tree] = group_workload(job, TOPOLOGIES)
    [warning] = [w for w in tree.warnings if key in w]
    assert "own metadata is ignored" in warning and "spec.template.metadata.annotations" in warning


def test_segment_annotations_on_the_pod_template_get_no_misplacement_warning():
    [tree] = group_workload(workload("job-indexed.yaml"), TOPOLOGIES)
    assert not [w for w in tree.warnings if "own metadata" in w]
