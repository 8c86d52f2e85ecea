"""Every label, annotation and key the project reads or writes, in one place: those users and controllers
set (read by the grouper), those the service writes (at bind, on wake-ups), and the reservation key of a
gang slot (built and taken apart only here). The topology package keeps the two it needs itself
(HOSTNAME_LABEL, the Topology kinds): it imports nothing of ours, so they are re-exported here."""
from __future__ import annotations

from topology.groups import Slot
from topology.tree import HOSTNAME_LABEL

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

# Kubernetes itself
HOSTNAME = HOSTNAME_LABEL                                   # kubernetes.io/hostname
STATEFULSET_POD_INDEX = "apps.kubernetes.io/pod-index"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"           # a static pod's mirror: never a victim
GRACE_ANNOTATION = "kai.scheduler/staleness-grace-period"
KAI_PODGROUP_VERSION_PREFIX = "scheduling.run.ai/"
LWS_API = "leaderworkerset.x-k8s.io/v1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
PODGROUP_KEYS = (KAI_PODGROUP_ANNOTATION, SP_PODGROUP_LABEL)  # how pods join a PodGroup (annotation, label)

# What the service writes
GANG_ANNOTATION = "tas-extender.io/gang"        # at bind: "<namespace>/<gang>"
SLOT_ANNOTATION = "tas-extender.io/slot"        # at bind: "<role>-<index>"
WAKE_ANNOTATION = "tas-extender.io/wake"        # on a refused pod: the time of its wake-up
FITS_GATE = "tas-extender.io/gang-fits"         # scheduling gate on a gang known not to fit at admission
PLACEMENT_PREFIX = "placement.tas-extender.io/"  # at bind: the domain at each level (app/placement.py)
TOPOLOGY_ANNOTATION = PLACEMENT_PREFIX + "topology"
ENV_PREFIX = "KAI_TOPOLOGY_"                     # the webhook's downward-API env vars of those annotations

# Which annotation and label prefixes make a pod of a watched workload a gang pod we wait for
OPT_IN_PREFIXES = ("kai.scheduler/", "kueue.x-k8s.io/podset-")

# The reservation of one gang slot in the cluster model: gang:<namespace>/<gang>#<role>-<index>
RESERVATION_PREFIX = "gang:"


def reservation_key(gang: str, slot: Slot) -> str:
    return f"{RESERVATION_PREFIX}{gang}#{slot}"


def is_reservation(key: str) -> bool:
    """Whether a cluster reservation key is a gang slot's (other tools reserve under their own keys)."""
    return key.startswith(RESERVATION_PREFIX)


def reservation_gang(key: str) -> str:
    """The gang of a reservation key (`gang:ns/job#worker-3` -> `ns/job`)."""
    return key.split("#", 1)[0].removeprefix(RESERVATION_PREFIX)


def reservation_prefix(gang: str) -> str:
    """Every reservation key of `gang` starts with this."""
    return f"{RESERVATION_PREFIX}{gang}#"


def reservation_shown(key: str) -> str:
    """A reservation key as the page shows it (`ns/job#worker-3`)."""
    return key.removeprefix(RESERVATION_PREFIX)


def parse_slot(text: str) -> Slot | None:
    """`worker-3` -> Slot("worker", 3); None when the text is not of that form."""
    role, _, index = text.rpartition("-")
    return Slot(role, int(index)) if role and index.isdigit() else None


# Which annotations make a workload a gang we place (on the root or on any pod template).
OPT_IN_ANNOTATIONS = (
    TOPOLOGY, REQUIRED, PREFERRED, SEGMENT_SIZE, SEGMENT_REQUIRED, SEGMENT_PREFERRED, POD_INDEX_LABEL,
    BATCH_MIN_MEMBER, KUEUE_REQUIRED, KUEUE_PREFERRED, KUEUE_SLICE_REQUIRED, KUEUE_SLICE_SIZE,
    LWS_EXCLUSIVE, LWS_SUBGROUP_EXCLUSIVE,
)
