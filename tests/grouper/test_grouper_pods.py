"""expand_pods, owner_of and identify_pod: the pods a controller creates and where each one belongs."""
from __future__ import annotations

import copy

import pytest

from grouper import UNINDEXED, GroupingError, OwnerRef, expand_pods, group_workload, identify_pod, owner_of
from topology.groups import SegmentInfo, Slot

from grouper_helpers import demo_topologies, load, workload

TOPOLOGIES = demo_topologies()
FIXTURES = ["tfjob-segments.yaml", "pytorchjob-elastic.yaml", "lws-segments.yaml", "job-indexed.yaml",
            "mpijob.yaml", "statefulset-indexed.yaml", "jobset.yaml", "job-kueue.yaml"]


def _by_name(pods):
    return {p["metadata"]["name"]: p for p in pods}


# --- expand_pods ------------------------------------------------------------------------------------

def test_expand_tfjob_pods():
    pods = expand_pods(workload("tfjob-segments.yaml"))
    assert len(pods) == 19
    pod = _by_name(pods)["tf-segments-worker-5"]
    labels = pod["metadata"]["labels"]
    assert labels["training.kubeflow.org/replica-type"] == "worker"
    assert labels["training.kubeflow.org/replica-index"] == "5"
    assert labels["training.kubeflow.org/job-name"] == "tf-segments"
    assert pod["metadata"]["annotations"]["kai.scheduler/segment-size"] == "4"   # from the template
    assert pod["metadata"]["namespace"] == "research"
    [owner] = pod["metadata"]["ownerReferences"]
    assert owner["kind"] == "TFJob" and owner["controller"] and owner["uid"].startswith("7d1c0a52")
    assert pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert _by_name(pods)["tf-segments-chief-0"]["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"


def test_expand_indexed_job_pods():
    pods = expand_pods(workload("job-indexed.yaml"))
    assert [p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for p in pods] == \
        [str(i) for i in range(8)]
    assert pods[3]["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "3"
    assert pods[3]["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "sweep"


def test_expand_job_uses_parallelism():
    job = workload("job-indexed.yaml")
    job["spec"]["parallelism"] = 3
    assert len(expand_pods(job)) == 3


def test_expand_lws_pods():
    pods = _by_name(expand_pods(workload("lws-segments.yaml")))
    assert len(pods) == 18
    leader, worker = pods["vllm-1"], pods["vllm-1-8"]
    assert leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"] == "1"
    assert leader["spec"]["containers"][0]["name"] == "vllm-leader"
    assert worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "8"
    assert worker["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/leader-name"] == "vllm-1"
    assert worker["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"] == "9"
    assert worker["metadata"]["ownerReferences"][0]["name"] == "vllm-1"
    assert leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-key"] == \
        worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-key"]


def test_expanded_pods_do_not_share_the_template_spec():
    pods = expand_pods(workload("job-indexed.yaml"))
    pods[0]["spec"]["containers"][0]["image"] = "changed"
    assert pods[1]["spec"]["containers"][0]["image"] == "python:3.12-slim"


# --- owner_of ---------------------------------------------------------------------------------------

def test_owner_of_controller_pods():
    tf_pod = expand_pods(workload("tfjob-segments.yaml"))[0]
    assert owner_of(tf_pod) == OwnerRef("kubeflow.org/v1", "TFJob", "research", "tf-segments",
                                        uid="7d1c0a52-2f55-4c1e-9a51-0b5f1e0c0001")
    job_pod = expand_pods(workload("job-indexed.yaml"))[0]
    assert owner_of(job_pod).kind == "Job" and owner_of(job_pod).key == "research/sweep"


def test_owner_of_lws_pod_carries_the_group_index():
    pod = _by_name(expand_pods(workload("lws-segments.yaml")))["vllm-1-3"]
    owner = owner_of(pod)
    assert (owner.kind, owner.name, owner.group_index) == ("LeaderWorkerSet", "vllm", 1)


def test_owner_of_podgroup_pods():
    _, pod, *_ = load("podgroup-disaggregated.yaml")
    assert owner_of(pod) == OwnerRef("scheduling.run.ai/v2alpha2", "PodGroup", "serving", "disagg-inference")
    _, sp_pod, *_ = load("podgroup-scheduler-plugins.yaml")
    assert owner_of(sp_pod) == OwnerRef("scheduling.x-k8s.io/v1alpha1", "PodGroup", "research", "mpi-gang")


def test_owner_of_prefers_the_workload_over_a_derived_pod_group_name():
    pod = expand_pods(workload("statefulset-indexed.yaml"))[0]
    pod["metadata"]["annotations"]["pod-group-name"] = "pg-cache-abc"
    assert owner_of(pod).kind == "StatefulSet"
    pod["metadata"]["annotations"]["pod-group-name"] = "hand-written"
    assert owner_of(pod).kind == "PodGroup"


def test_owner_of_bare_pod():
    assert owner_of({"metadata": {"name": "p", "namespace": "x"}}) is None


# --- identify_pod -----------------------------------------------------------------------------------

@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_expanded_pod_lands_on_its_own_slot(fixture):
    manifest = workload(fixture)
    trees = {t.key: t for t in group_workload(manifest, TOPOLOGIES)}
    seen = {}
    for pod in expand_pods(manifest):
        identity = identify_pod(pod, manifest, TOPOLOGIES)
        tree = trees[identity.gang]
        leaf = tree.group(identity.subgroup)
        assert identity.slot in leaf.slots and leaf.is_leaf
        assert identity.segment == leaf.segment
        assert identity.podgroup_name == tree.name and identity.topology == tree.topology
        if identity.segment:
            assert leaf.slots[identity.rank] == identity.slot
        seen[(identity.gang, identity.slot)] = pod["metadata"]["name"]
    assert len(seen) == sum(len(t.slots()) for t in trees.values())


def test_identify_tfjob_worker():
    job = workload("tfjob-segments.yaml")
    pod = _by_name(expand_pods(job))["tf-segments-worker-9"]
    identity = identify_pod(pod, job, TOPOLOGIES)
    assert identity.slot == Slot("worker", 9) and identity.subgroup == "worker-2"
    assert identity.segment == SegmentInfo("worker", 2, 4, 4) and identity.rank == 1
    assert identity.gang == "research/pg-tf-segments-7d1c0a52-2f55-4c1e-9a51-0b5f1e0c0001"
    assert identity.topology == "default" and identity.warnings == []
    chief = identify_pod(_by_name(expand_pods(job))["tf-segments-chief-0"], job, TOPOLOGIES)
    assert chief.subgroup == "chief" and chief.segment is None and chief.rank is None


def test_identify_lws_worker_subtracts_the_leader():
    lws = workload("lws-segments.yaml")
    pods = _by_name(expand_pods(lws))
    first = identify_pod(pods["vllm-0-1"], lws)
    assert first.subgroup == "worker-0" and first.rank == 1 and first.slot == Slot("worker", 1)   # leader is rank 0
    fifth = identify_pod(pods["vllm-1-5"], lws)
    assert fifth.subgroup == "worker-1" and fifth.rank == 0
    assert fifth.podgroup_name == "pg-vllm-1-0b6a2d7e-3c1f-49a1-b2f0-6e7d8c9a0003"
    leader = identify_pod(pods["vllm-1"], lws)
    # upstream LWS puts the leader in subgroup 0
    assert leader.subgroup == "worker-0" and leader.slot == Slot("leader", 0) and leader.rank == 0
    assert leader.segment.index == 0


def test_identify_elastic_segment_pod():
    job = workload("pytorchjob-elastic.yaml")
    pod = _by_name(expand_pods(job))["llm-elastic-worker-13"]
    identity = identify_pod(pod, job)
    assert identity.subgroup == "worker-3" and identity.tree.group("worker-3").min_member == 0


def test_identify_pod_of_a_workload_that_does_not_opt_in():
    job = workload("job-indexed.yaml")
    pod = expand_pods(job)[0]
    del job["metadata"]["annotations"]
    del job["spec"]["template"]["metadata"]
    assert identify_pod(pod, job) is None


def test_identify_pod_with_invalid_annotation_raises():
    job = workload("tfjob-segments.yaml")
    pod = expand_pods(job)[-1]
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["kai.scheduler/segment-size"] = "0"
    with pytest.raises(GroupingError, match="kai.scheduler/segment-size='0'"):
        identify_pod(pod, job)


def test_identify_pod_with_a_bad_index_label():
    job = workload("tfjob-segments.yaml")
    pod = expand_pods(job)[-1]
    pod["metadata"]["labels"]["training.kubeflow.org/replica-index"] = "x"
    with pytest.raises(GroupingError, match=r"Pod research/tf-segments-worker-15: label "
                                            r"training.kubeflow.org/replica-index='x' is invalid"):
        identify_pod(pod, job)
    del pod["metadata"]["labels"]["training.kubeflow.org/replica-index"]
    with pytest.raises(GroupingError, match="training.kubeflow.org/replica-index .* is missing"):
        identify_pod(pod, job)


def test_identify_pod_with_an_unknown_replica_type():
    job = workload("tfjob-segments.yaml")
    pod = expand_pods(job)[-1]
    pod["metadata"]["labels"]["training.kubeflow.org/replica-type"] = "evaluator"
    with pytest.raises(GroupingError, match=r"replica-type='evaluator' does not name a role.*valid: chief, ps, worker"):
        identify_pod(pod, job)


def test_identify_pod_beyond_the_declared_replicas_warns():
    job = workload("job-indexed.yaml")
    pod = copy.deepcopy(expand_pods(job)[0])
    pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = "12"
    identity = identify_pod(pod, job)
    assert identity.subgroup == "job" and identity.segment is None
    assert any("outside the 8 job pods" in w for w in identity.warnings)


def test_identify_pod_with_only_generate_name():
    job = workload("job-indexed.yaml")
    pod = expand_pods(job)[5]
    pod["metadata"]["generateName"] = pod["metadata"].pop("name") + "-"
    assert identify_pod(pod, job).subgroup == "job-1"


def test_identify_podgroup_pod():
    podgroup, *pods = load("podgroup-disaggregated.yaml")
    pod = _by_name(pods)["disagg-prefill-2-1"]
    identity = identify_pod(pod, podgroup, TOPOLOGIES, pods=pods)
    assert identity.gang == "serving/disagg-inference" and identity.podgroup_name == "disagg-inference"
    assert identity.subgroup == "prefill-2" and identity.slot == Slot("prefill-2", 1)
    assert identity.segment is None and identity.topology == "default"
    alone = identify_pod(pod, podgroup)          # without its siblings the pod is the leaf's first
    assert alone.slot == Slot("prefill-2", 0)


def test_identify_pod_of_an_unindexed_role():
    job = workload("job-indexed.yaml")
    del job["spec"]["completionMode"]
    pod = expand_pods(job)[2]
    identity = identify_pod(pod, job)
    assert identity.slot == Slot("job", UNINDEXED) and identity.subgroup == "job"
    assert identity.segment is None and identity.rank is None
    assert identity.tree.group("job").is_leaf and identity.gang.startswith("research/pg-sweep-")


def test_identify_lws_pods_before_the_lws_webhook_labels_them():
    lws = workload("lws-segments.yaml")
    pods = _by_name(expand_pods(lws))
    leader, worker = pods["vllm-1"], pods["vllm-1-6"]
    for key in ("leaderworkerset.sigs.k8s.io/worker-index", "leaderworkerset.sigs.k8s.io/group-index"):
        del leader["metadata"]["labels"][key]
    del worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"]
    identity = identify_pod(leader, lws)
    assert identity.slot == Slot("leader", 0) and identity.podgroup_name.startswith("pg-vllm-1-")
    identity = identify_pod(worker, lws)
    assert identity.slot == Slot("worker", 6) and identity.subgroup == "worker-1" and identity.rank == 1
    worker["metadata"]["labels"]["apps.kubernetes.io/pod-index"] = "7"
    assert identify_pod(worker, lws).slot == Slot("worker", 7)


def test_identify_lws_pod_in_a_group_that_does_not_exist():
    lws = workload("lws-segments.yaml")
    pod = _by_name(expand_pods(lws))["vllm-1-2"]
    pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"] = "5"
    with pytest.raises(GroupingError, match=r"group-index='5' is invalid; expected 0 to 1"):
        identify_pod(pod, lws)


def test_identify_a_pod_that_names_another_podgroup_is_a_grouping_error():
    podgroup, *pods = load("podgroup-disaggregated.yaml")
    pod = copy.deepcopy(_by_name(pods)["disagg-prefill-2-1"])
    pod["metadata"]["annotations"]["pod-group-name"] = "someone-else"
    with pytest.raises(GroupingError, match=r"disagg-prefill-2-1: it names another PodGroup than PodGroup "
                                            r"serving/disagg-inference"):
        identify_pod(pod, podgroup, TOPOLOGIES, pods=pods)


def test_index_labels_are_plain_decimal_integers():
    job = workload("tfjob-segments.yaml")
    pod = expand_pods(job)[-1]
    pod["metadata"]["labels"]["training.kubeflow.org/replica-index"] = "1_5"      # int() would read 15
    with pytest.raises(GroupingError, match=r"replica-index='1_5' is invalid; expected a non-negative integer"):
        identify_pod(pod, job)


def test_an_lws_worker_whose_name_ends_in_a_non_ascii_digit_is_a_grouping_error():
    lws = workload("lws-segments.yaml")
    worker = _by_name(expand_pods(lws))["vllm-1-6"]
    del worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"]
    worker["metadata"]["name"] = "vllm-1-\u00b2"           # "²".isdigit() is True, int("²") fails
    with pytest.raises(GroupingError, match="pod name does not end in its ordinal"):
        identify_pod(worker, lws)
