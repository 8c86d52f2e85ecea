"""The decision for one admission request: which workload the pod belongs to, and what it gets.

    pod -> owner reference -> owner object from the watch cache -> grouper identity -> injection

Outcomes:
- not a Pod CREATE, no owner, or an owner that does not opt in: allowed, unchanged;
- invalid annotations (the grouper raises GroupingError), or segments on pods that carry no index:
  denied (422 Invalid) with the grouper's message, which names the annotation, the value and what is valid;
  a required level without kai.scheduler/topology that no (or more than one) topology has: allowed
  unchanged with that message as a warning (the scheduler refuses the gang with it);
- a workload of a watched kind that the cache has not seen yet: denied (503) for a grace period, so the
  controller retries once the watch caught up; after it, allowed unchanged with a warning. A PodGroup not
  seen yet only gets a warning (its pods carry their grouping themselves). Kinds that index their pods only
  through pod-index-label (StatefulSet, JobSet, --extra-kinds) are held back only when the pod carries an
  opt-in annotation from its template: most StatefulSets are not gangs and must never wait.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.state.identities import IdentityCache
from app.state.objects import ObjectCache, pod_shape_problem
from app.ports import WATCHED_KINDS, watches
from grouper import GroupingError, OwnerRef, identify_pod, owner_of
from grouper.errors import UnresolvedLevelError
from grouper.kinds import kind_of, numbering_kinds, workload_shape
from grouper.affinity import HOSTNAME
from grouper.names import FITS_GATE, KUEUE_SLICE_SIZE, OPT_IN_ANNOTATIONS, POD_INDEX_LABEL, SEGMENT_SIZE
from grouper.node_limit import unmodelled_spreads
from grouper.podgroups import is_podgroup, validate_podgroup
from grouper.staleness import grace_period
from topology.objects import group_of
from topology.tree import TopologyTree

from . import patch
from .caches import OwnerWaits
from .native import gate_operations, native_warnings
from .mutate import DEFAULT_SCHEDULER, injection_for, pod_mutation
from .review import AdmissionRequest

SEGMENT_SIZE_KEYS = (SEGMENT_SIZE, KUEUE_SLICE_SIZE)


@dataclass
class Decision:
    allowed: bool = True
    operations: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    message: str | None = None
    code: int | None = None
    reason: str | None = None

    @classmethod
    def deny(cls, message: str, code: int, reason: str, warnings: list[str] | None = None) -> "Decision":
        return cls(False, [], list(warnings or []), message, code, reason)


@dataclass
class Context:
    """What a decision reads: the owner cache, the topology trees and the settings."""

    objects: ObjectCache
    topologies: Mapping[str, TopologyTree]
    settings: Any
    waits: OwnerWaits
    trees: IdentityCache          # the service's one cache of groupings (app/state/identities.py)
    synced: bool = True           # False until the service's first full list of the cluster
    gate: Any = None              # app.kube.native_gate.NativeGate, where the service has one
    # (pod, identity, scheduler name, dry_run) -> whether the gang is known not to fit now (app.scheduling.
    # unfit_gate.UnfitGangs.should_gate, a read); None: never gated
    unfit: Callable[..., bool] | None = None

    @property
    def owner_grace(self) -> float:
        return float(self.settings.webhook_owner_grace)

    def watches(self, api_group: str, kind: str) -> bool:
        """Whether the service's source feeds this kind into `objects` (WATCHED_KINDS, --extra-kinds)."""
        return watches(getattr(self.settings, "watched_kinds", WATCHED_KINDS), api_group, kind)


def admit(request: AdmissionRequest, context: Context) -> Decision:
    if not _is_pod_create(request):
        return Decision()
    if request.object is None:
        return Decision.deny("request.object is missing; a Pod CREATE carries the pod", 400, "BadRequest")
    problem = pod_shape_problem(request.object, "request.object")
    if problem:
        return Decision.deny(problem, 400, "BadRequest")
    pod = _with_namespace(request.object, request.namespace)
    decision = _admit_pod(pod, context, request.dry_run)
    if decision.allowed:
        decision.warnings += native_warnings(pod, context.objects, context.topologies)
    return decision


def _admit_pod(pod: Mapping, context: Context, dry_run: bool) -> Decision:
    owner = owner_of(pod)
    if owner is None:
        return Decision(warnings=_not_grouped_note(pod, "it has no owner"))
    owner_obj = context.objects.get(owner.kind, owner.namespace, owner.name, group=group_of(owner.api_version))
    if owner_obj is None or not context.synced:
        return _owner_missing(pod, owner, context, dry_run)
    if not dry_run:
        context.waits.found(_owner_key(owner))
    return _admit_member(pod, owner_obj, context, dry_run)


def _admit_member(pod: Mapping, owner_obj: Mapping, context: Context, dry_run: bool = False) -> Decision:
    try:
        identity, warnings = _identify(pod, owner_obj, context)
    except UnresolvedLevelError as error:         # the scheduler refuses the gang with this reason
        return Decision(warnings=[str(error)])
    except GroupingError as error:
        return Decision.deny(str(error), 422, "Invalid")
    if identity is None:
        return Decision()
    problem = None if is_podgroup(owner_obj) else _segments_without_index(owner_obj, identity.slot.role)
    if problem:
        return Decision.deny(problem, 422, "Invalid", warnings)
    tree = context.topologies.get(identity.topology) if identity.topology else None
    if identity.topology and tree is None:
        warnings.append(f"topology {identity.topology!r} is not known to the extender; "
                        f"the KAI_TOPOLOGY_* env vars are not injected")
    settings = context.settings
    scheduler = settings.scheduler_name.split(",")[0] if settings.set_scheduler_name and identity.topology else None
    injection = injection_for(identity, tree, scheduler, membership=not is_podgroup(owner_obj))
    mutation = pod_mutation(pod, injection)
    unmodelled = _unmodelled_spreads(pod)
    gate = gate_operations(pod, identity, owner_obj, context.gate, dry_run)
    if not gate and not is_podgroup(owner_obj):     # a PodGroup's grouping here sees this one pod, not the gang
        gate = _unfit_gate(pod, identity, _final_scheduler(pod, scheduler), context, dry_run)
    return Decision(True, mutation.operations + gate, warnings + unmodelled + mutation.warnings
                    + _bad_grace(pod, owner_obj))


def _final_scheduler(pod: Mapping, injected: str | None) -> str | None:
    """spec.schedulerName as the pod will be created (mutate.py keeps a name other than the default)."""
    current = (pod.get("spec") or {}).get("schedulerName")
    if injected and (not current or current in (DEFAULT_SCHEDULER, injected)):
        return injected
    return current or DEFAULT_SCHEDULER


def _unfit_gate(pod: Mapping, identity, scheduler: str | None, context: Context, dry_run: bool) -> list[dict]:
    """FITS_GATE on a pod of a gang known not to fit now (the service lifts it when the gang fits)."""
    if context.unfit is None or not identity.topology or not context.unfit(pod, identity, scheduler, dry_run):
        return []
    return patch.add_gate((pod.get("spec") or {}).get("schedulingGates"), FITS_GATE)


def _bad_grace(pod: Mapping, owner_obj: Mapping) -> list[str]:
    """Staleness grace periods that are not durations: skipped (as KAI skips them), said at admission."""
    return [f"{problem}; the gang uses the next one set, else the service's --staleness-grace-period"
            for problem in grace_period(owner_obj, [pod])[1]]


def _unmodelled_spreads(pod: Mapping) -> list[str]:
    keys = unmodelled_spreads(pod.get("spec") or {}, (pod.get("metadata") or {}).get("labels") or {})
    return [f"spec.topologySpreadConstraints: whenUnsatisfiable DoNotSchedule on {key} spreads this gang's pods "
            f"over every {key} domain, which the gang's plan does not do (only {HOSTNAME} is modelled); "
            f"kube-scheduler may drop the nodes planned for it. Use ScheduleAnyway, or a topology placement "
            f"annotation, to say where the gang goes" for key in keys]


def _identify(pod: Mapping, owner_obj: Mapping, context: Context):
    """(identity or None, warnings). For an explicit PodGroup only the PodGroup's own warnings count:
    the grouping sees this one pod, so notes about missing members would be noise."""
    if is_podgroup(owner_obj):
        identity = identify_pod(pod, owner_obj, context.topologies)
        return identity, validate_podgroup(owner_obj, context.topologies)
    trees = context.trees.trees(owner_obj, context.topologies)
    identity = identify_pod(pod, owner_obj, context.topologies, trees=trees)
    return identity, list(identity.warnings) if identity else []


def _is_pod_create(request: AdmissionRequest) -> bool:
    return (request.operation == "CREATE" and request.kind.kind == "Pod" and request.kind.group == ""
            and not request.sub_resource)


def _with_namespace(pod: Mapping, namespace: str) -> dict:
    """The pod as the grouper should see it: pods may arrive without metadata.namespace."""
    metadata = dict(pod.get("metadata") or {})
    metadata["namespace"] = metadata.get("namespace") or namespace or "default"
    return {**pod, "metadata": metadata}




def _owner_key(owner: OwnerRef) -> str:
    return f"{owner.kind}.{group_of(owner.api_version)}/{owner.namespace}/{owner.name}"


def _annotations(pod: Mapping) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def _owner_missing(pod: Mapping, owner: OwnerRef, context: Context, dry_run: bool) -> Decision:
    if not context.watches(group_of(owner.api_version), owner.kind):
        return _unwatched_owner(pod, owner)
    described = f"{owner.kind} {owner.namespace}/{owner.name}"
    if owner.kind == "PodGroup":
        # pods name their PodGroup themselves and may be applied before it (kubectl apply -f of both,
        # no controller to retry); they carry their grouping already and only miss the topology env
        return Decision(warnings=[f"{described} not seen by the webhook yet; pod admitted without the "
                                  f"KAI_TOPOLOGY_* env vars"])
    if not _always_grouped(owner) and not _opt_in_keys(pod):
        return Decision()             # e.g. a database StatefulSet: nothing to wait for
    waited = context.waits.waited(_owner_key(owner), record=not dry_run)
    if waited < context.owner_grace:
        why = ("the webhook has not finished its first sync of the cluster" if not context.synced else
               f"the owner {described} of this pod is not in the webhook's cache yet (its watch lags behind "
               f"the controller)")
        return Decision.deny(
            f"{why}; retry shortly: the pod is admitted with its segment and topology settings once "
            f"{described} is seen, or unchanged after {context.owner_grace:g}s", 503, "ServiceUnavailable")
    return Decision(warnings=[f"{described} not seen by the webhook for {waited:.0f}s; pod admitted without "
                              f"segment labels and KAI_* env vars"])


def _always_grouped(owner: OwnerRef) -> bool:
    """Kinds whose every workload may be a gang from root annotations alone: those that number their pods
    themselves (Jobs, kubeflow jobs, LWS; grouper/kinds/ `numbers_pods`)."""
    return bool(kind_of({"apiVersion": owner.api_version, "kind": owner.kind}).numbers_pods)


def _unwatched_owner(pod: Mapping, owner: OwnerRef) -> Decision:
    """A pod of a kind the extender does not watch (ReplicaSet, RayCluster, a custom kind not in --extra-kinds):
    it cannot be grouped.
    Segment annotations there are an error when nothing could index the pods, else only a note."""
    annotations = _annotations(pod)
    size_key = next((key for key in SEGMENT_SIZE_KEYS if key in annotations), None)
    if size_key is not None and POD_INDEX_LABEL not in annotations:
        return Decision.deny(
            f"{owner.kind} {owner.namespace}/{owner.name}: annotation {size_key}={annotations[size_key]!r} "
            f"is invalid here: {owner.kind} is not a supported kind and its pods carry no index; set "
            f"{POD_INDEX_LABEL} to the pod label that holds each pod's index, or use a supported kind "
            f"({numbering_kinds()})", 422, "Invalid")
    return Decision(warnings=_not_grouped_note(
        pod, f"its owner kind {owner.kind} is not watched by the extender (add it with --extra-kinds "
             f"<plural>.<group>/<version>={owner.kind})"))


def _opt_in_keys(pod: Mapping) -> list[str]:
    return sorted(key for key in OPT_IN_ANNOTATIONS if key in _annotations(pod))


def _not_grouped_note(pod: Mapping, why: str) -> list[str]:
    present = _opt_in_keys(pod)
    if not present:
        return []
    return [f"{', '.join(present)} ignored: {why}, so the pod is not part of a placed gang"]


def _segments_without_index(workload: Mapping, role_name: str) -> str | None:
    """Segment annotations on a role whose pods carry no index (a non-Indexed Job, a custom kind
    without pod-index-label): the grouper can only ignore them, the webhook refuses them."""
    role = workload_shape(workload).role(role_name)
    if role is None or role.index_label is not None:
        return None
    size_key = next((key for key in SEGMENT_SIZE_KEYS if key in role.annotations), None)
    if size_key is None:
        return None
    metadata = workload.get("metadata") or {}
    return (f"{workload.get('kind')} {metadata.get('namespace') or 'default'}/{metadata.get('name')}: annotation "
            f"{size_key}={role.annotations[size_key]!r} on {role.field} is invalid: the pods of this role carry "
            f"no index; set {POD_INDEX_LABEL} to the pod label that holds each pod's index, or use a kind that "
            f"numbers its pods ({numbering_kinds()})")
