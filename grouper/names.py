"""Annotation and label keys the grouper reads and the controllers set."""
from __future__ import annotations

# KAI: workload root (topology may also sit on the pod template, where it wins)
TOPOLOGY = "kai.scheduler/topology"
REQUIRED = "kai.scheduler/topology-required-placement"
PREFERRED = "kai.scheduler/topology-preferred-placement"
# KAI: pod template, per replica type
SEGMENT_SIZE = "kai.scheduler/segment-size"
SEGMENT_REQUIRED = "kai.scheduler/segment-topology-required-placement"
SEGMENT_PREFERRED = "kai.scheduler/segment-topology-preferred-placement"
POD_INDEX_LABEL = "kai.scheduler/pod-index-label"
BATCH_MIN_MEMBER = "kai.scheduler/batch-min-member"
STRATEGY = "kai.scheduler/placement-strategy"
STRATEGIES = ("binpack", "spread")

# Kueue pod-template aliases
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"

# LeaderWorkerSet
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
LWS_LEADER_NAME = "leaderworkerset.sigs.k8s.io/leader-name"
LWS_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LWS_SUBGROUP_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"

# batch/v1 Job
JOB_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_NAME = "batch.kubernetes.io/job-name"
JOB_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"

# Kubeflow training operator
KF_JOB_NAME = "training.kubeflow.org/job-name"
KF_OPERATOR = "training.kubeflow.org/operator-name"
KF_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KF_REPLICA_INDEX = "training.kubeflow.org/replica-index"
KF_JOB_ROLE = "training.kubeflow.org/job-role"

# JobSet
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"

# PodGroups
KAI_PODGROUP_ANNOTATION = "pod-group-name"
KAI_SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
KAI_SEGMENT_INDEX_LABEL = "kai.scheduler/segment-index"
SP_PODGROUP_LABEL = "scheduling.x-k8s.io/pod-group"
KAI_PODGROUP_API = "scheduling.run.ai/v2alpha2"
SP_PODGROUP_API = "scheduling.x-k8s.io/v1alpha1"

# Which annotations make a workload a gang we place (on the root or on any pod template).
OPT_IN_ANNOTATIONS = (
    TOPOLOGY, REQUIRED, PREFERRED, SEGMENT_SIZE, SEGMENT_REQUIRED, SEGMENT_PREFERRED, POD_INDEX_LABEL,
    BATCH_MIN_MEMBER, KUEUE_REQUIRED, KUEUE_PREFERRED, KUEUE_SLICE_REQUIRED, KUEUE_SLICE_SIZE,
    LWS_EXCLUSIVE, LWS_SUBGROUP_EXCLUSIVE,
)
