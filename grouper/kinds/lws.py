"""LeaderWorkerSet: each group (replica) is its own gang of a leader and size-1 workers, numbered in
worker-index; pods find it by its name label. Its subgroups are the workers' segments, the leader in
subgroup 0; exclusive-topology and subgroup-exclusive-topology make the group and its subgroups exclusive."""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import replace

from .. import names
from ..errors import describe
from .base import NO_RULE, OwnerRef, RoleTemplate, SegmentRule, WatchedKind, WorkloadKind, WorkloadShape
from .fields import count_field, mapping_field, parse_int, role
from .pods import index_of, int_label, labels_of, make_pod, owner_reference, pod_annotations, pod_error

KIND = "LeaderWorkerSet"
GROUP = "leaderworkerset.x-k8s.io"
SUBGROUP_POLICY = "spec.leaderWorkerTemplate.subGroupPolicy"
SUBGROUP_SIZE = SUBGROUP_POLICY + ".subGroupSize"


def roles(lws: Mapping) -> list[RoleTemplate]:
    template = mapping_field(lws, "spec.leaderWorkerTemplate", (lws.get("spec") or {}).get("leaderWorkerTemplate"))
    size = count_field(lws, "spec.leaderWorkerTemplate.size", template.get("size"), 1, minimum=1)
    worker = mapping_field(lws, "spec.leaderWorkerTemplate.workerTemplate", template.get("workerTemplate"))
    leader = mapping_field(lws, "spec.leaderWorkerTemplate.leaderTemplate", template.get("leaderTemplate")) or worker
    leader_field = "spec.leaderWorkerTemplate." + ("leaderTemplate" if template.get("leaderTemplate")
                                                   else "workerTemplate")
    made = [RoleTemplate("leader", leader_field, leader_field, 1, leader, names.LWS_WORKER_INDEX, 0)]
    if size > 1:
        path = "spec.leaderWorkerTemplate.workerTemplate"
        made.append(role(lws, "worker", path, path, size - 1, worker, names.LWS_WORKER_INDEX, 1))
    return made


def gangs(lws: Mapping) -> int:
    return count_field(lws, "spec.replicas", (lws.get("spec") or {}).get("replicas"), 1)


def owner(pod: Mapping) -> OwnerRef | None:
    labels = labels_of(pod)
    if not labels.get(names.LWS_NAME):
        return None
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    return OwnerRef(names.LWS_API, KIND, namespace, labels[names.LWS_NAME],
                    parse_int(labels.get(names.LWS_GROUP_INDEX)))


def _ordinal(pod: Mapping, prefix: str | None) -> int | None:
    """A StatefulSet pod's ordinal: its pod-index label, else the number after `prefix-` in its name."""
    labels = labels_of(pod)
    if labels.get(names.STATEFULSET_POD_INDEX) is not None:
        return int_label(pod, names.STATEFULSET_POD_INDEX, labels[names.STATEFULSET_POD_INDEX])
    name = (pod.get("metadata") or {}).get("name") or ""
    suffix = name[len(prefix) + 1:] if prefix and name.startswith(prefix + "-") else ""
    return parse_int(suffix) if suffix.isascii() and suffix.isdigit() else None


def worker_index(pod: Mapping) -> int:
    """worker-index, set by the LWS pod webhook; when our webhook runs first, a worker's ordinal in its
    group's StatefulSet (workers carry the leader-name annotation) and 0 for the leader."""
    value = labels_of(pod).get(names.LWS_WORKER_INDEX)
    if value is not None:
        return int_label(pod, names.LWS_WORKER_INDEX, value)
    leader = pod_annotations(pod).get(names.LWS_LEADER_NAME)
    if leader is None:
        return 0
    ordinal = _ordinal(pod, leader)
    if ordinal is None:
        raise pod_error(pod, f"label {names.LWS_WORKER_INDEX} is missing and the pod name does not end in "
                             f"its ordinal")
    return ordinal


def pod_role(pod: Mapping, shape: WorkloadShape) -> RoleTemplate:
    return shape.roles[0] if worker_index(pod) == 0 else shape.roles[-1]


def _group_index(pod: Mapping, lws: Mapping) -> int | None:
    value = labels_of(pod).get(names.LWS_GROUP_INDEX)
    if value is not None:
        return int_label(pod, names.LWS_GROUP_INDEX, value)
    if pod_annotations(pod).get(names.LWS_LEADER_NAME) is None:      # a leader: its leader-StatefulSet ordinal
        return _ordinal(pod, (lws.get("metadata") or {}).get("name"))
    return None


def pod_gang(pod: Mapping, lws: Mapping, count: int) -> int:
    group = _group_index(pod, lws)
    if group is None or group >= count:
        value = labels_of(pod).get(names.LWS_GROUP_INDEX)
        raise pod_error(pod, f"label {names.LWS_GROUP_INDEX}={value!r} is invalid; expected 0 to {count - 1} "
                             f"(the groups of {describe(lws)})")
    return group


def pods(lws: Mapping, shape: WorkloadShape) -> list[dict]:
    metadata = lws.get("metadata") or {}
    name = metadata.get("name")
    size = sum(the_role.replicas for the_role in shape.roles)
    made = []
    for group in range(shape.groups):
        leader = f"{name}-{group}"
        group_key = hashlib.sha1(f"{metadata.get('namespace')}/{leader}".encode()).hexdigest()
        for the_role in shape.roles:
            for index in the_role.indexes():
                labels = {names.LWS_NAME: name, names.LWS_GROUP_INDEX: str(group), names.LWS_GROUP_KEY: group_key,
                          names.LWS_WORKER_INDEX: str(index)}
                if the_role.index_label and the_role.index_label != names.LWS_WORKER_INDEX:
                    labels[the_role.index_label] = str(index)
                annotations = {names.LWS_SIZE: str(size)}
                if the_role.name == "leader":
                    owner_ref = owner_reference(lws, "apps/v1", "StatefulSet", name)
                    pod_name = leader
                else:
                    annotations[names.LWS_LEADER_NAME] = leader
                    owner_ref = owner_reference(lws, "apps/v1", "StatefulSet", leader)
                    pod_name = f"{leader}-{index}"
                made.append(make_pod(lws, the_role, pod_name, labels, annotations, owner_ref))
    return made


def pod_index(pod: Mapping, the_role: RoleTemplate) -> int | None:
    """worker-index, unless the template names its own pod-index-label."""
    return worker_index(pod) if the_role.index_label == names.LWS_WORKER_INDEX else index_of(pod, the_role)


def subgroup_shift(group_size: int, subgroup_size: int) -> int:
    """How upstream LWS numbers workers into subgroups (the leader is in subgroup 0): worker i goes to
    (i-1) // S when (size-1) % S == 0 and size % S != 0, else to i // S. As a shift of the 0-based worker
    position p = i-1: 0 in the first case, 1 in the second (the leader takes a place in subgroup 0)."""
    if (group_size - 1) % subgroup_size == 0 and group_size % subgroup_size != 0:
        return 0
    return 1


def _subgroups(lws: Mapping, workers: RoleTemplate) -> SegmentRule:
    """subGroupSize segments the workers; upstream labels the leader subgroup 0 too (unless the policy type
    is LeaderExcluded), so its subgroup affinity ties it to the first workers: it joins segment worker-0."""
    template = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
    policy = mapping_field(lws, SUBGROUP_POLICY, template.get("subGroupPolicy"))
    rule = SegmentRule(size_field=SUBGROUP_SIZE, exclusive=names.LWS_SUBGROUP_EXCLUSIVE)
    if policy.get("subGroupSize") is None:
        return rule
    size = count_field(lws, SUBGROUP_SIZE, policy["subGroupSize"], 1, minimum=1)
    joined_by = None if policy.get("subGroupType") == "LeaderExcluded" else "leader"
    return replace(rule, size=size, shift=subgroup_shift(workers.replicas + 1, size), joined_by=joined_by)


def segment_rule(lws: Mapping, the_role: RoleTemplate) -> SegmentRule:
    """The leader is never split: without a leaderTemplate it carries the worker template's segment
    annotations, which describe the workers."""
    if the_role.name == "leader":
        return SegmentRule(segmented=False)
    return _subgroups(lws, the_role) if the_role.name == "worker" else NO_RULE


def apart_gang(pod: Mapping) -> str | None:
    """Upstream enforces exclusivity with required anti-affinity on the group-key label (Exists, NotIn its
    own key): a pod with that label belongs to its group's gang, whichever PodGroup KAI names it by."""
    metadata = pod.get("metadata") or {}
    group = (metadata.get("labels") or {}).get(names.LWS_GROUP_KEY)
    if group is None:
        return None
    name = (metadata.get("annotations") or {}).get(names.KAI_PODGROUP_ANNOTATION) or group
    return f"{metadata.get('namespace') or 'default'}/{name}"


LWS = WorkloadKind(
    "lws", (KIND,), None,
    watch=(WatchedKind(GROUP, "v1", "leaderworkersets", KIND, True),),
    roles=roles, gangs=gangs, owner=owner, owner_rank=20, pods=pods,
    pod_role=pod_role, pod_index=pod_index, pod_gang=pod_gang,
    one_after_another=lambda lws: (lws.get("spec") or {}).get("startupPolicy") == "LeaderReady",
    exclusive_annotation=names.LWS_EXCLUSIVE, segment_rule=segment_rule,
    always_apart=True, apart_gang=apart_gang,
    numbers_pods=KIND,
)
