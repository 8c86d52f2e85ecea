"""Workloads (Job, kubeflow jobs, LeaderWorkerSet, annotated custom kinds) -> group trees.

root (the gang, with the workload constraint) -> one group per role (replica type) -> segment leaves
"<role>-<i>" holding indexes [i*S, (i+1)*S); an unsegmented role is itself a leaf named after the role.
A LeaderWorkerSet gives one tree per group (replica): each group is its own gang.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from topology.groups import Group, GroupTree, RoleSpec, SegmentInfo, Slot
from topology.planner import policy_names
from topology.tree import TopologyTree

from . import names
from .errors import GroupingError, UnresolvedLevelError, describe, invalid
from .kinds import (RoleTemplate, SegmentRule, WorkloadKind, WorkloadShape, annotations_of, check_requests,
                    mapping_field, parse_int, workload_shape)
from .priority import class_priority
from .levels import LevelRef, check_not_coarser, find_topology, infer_topology, level_index, topologies_with
from .segments import segment_bounds, segment_count, segment_min

# Level annotations that mean nothing without kai.scheduler/topology naming the topology.
KAI_LEVEL_SOURCES = {f"annotation {key}" for key in (names.REQUIRED, names.PREFERRED, names.SEGMENT_REQUIRED,
                                                    names.SEGMENT_PREFERRED)}


@dataclass
class Constraint:
    required: LevelRef | None = None
    preferred: LevelRef | None = None
    exclusive: bool = False

    def refs(self) -> list[LevelRef]:
        return [ref for ref in (self.required, self.preferred) if ref is not None]


@dataclass
class SegmentSpec:
    size: int
    constraint: Constraint = field(default_factory=Constraint)
    shift: int = 0                     # places of segment 0 held outside the role (LWS leader)
    source: str = ""                   # the annotation or field that set the size
    joined_by: str | None = None       # the role whose pods join segment 0 (LWS leader)


@dataclass
class RolePlan:
    """What the grouper decided for one role before building its groups."""

    role: RoleTemplate
    constraint: Constraint
    segments: SegmentSpec | None
    minimum: int | None = None         # elastic minimum (None: every pod required)


# --- opting in -----------------------------------------------------------------------------------

def opts_in(workload: Mapping, shape: WorkloadShape | None = None) -> bool:
    """Pods of a workload without any topology, segment or gang-size setting are not gangs."""
    if any(key in annotations_of(workload) for key in names.OPT_IN_ANNOTATIONS):
        return True
    spec = workload.get("spec") or {}
    if ((spec.get("runPolicy") or {}).get("schedulingPolicy") or {}).get("minAvailable") is not None:
        return True
    shape = shape or workload_shape(workload)
    return any(key in role.annotations for role in shape.roles for key in names.OPT_IN_ANNOTATIONS)


# --- small parsers ---------------------------------------------------------------------------------

def _int_annotation(obj: Mapping, key: str, value, where: str, low: int, high: int | None, meaning: str) -> int:
    number = parse_int(value)
    if number is None or number < low or (high is not None and number > high):
        expected = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
        raise GroupingError(f"{describe(obj)}: annotation {key}={value!r}{where} is invalid; "
                            f"expected {expected} ({meaning})")
    return number


def _level(annotations: Mapping, key: str, where: str = "") -> LevelRef | None:
    value = annotations.get(key)
    return LevelRef(str(value), f"annotation {key}", where) if value else None


def _strategy(workload: Mapping, shape: WorkloadShape) -> str | None:
    candidates = [(annotations_of(workload).get(names.STRATEGY), "")]
    candidates += [(role.annotations.get(names.STRATEGY), f" on {role.field}") for role in shape.roles]
    for value, where in candidates:
        if value is None:
            continue
        if value not in policy_names():
            raise GroupingError(f"{describe(workload)}: annotation {names.STRATEGY}={value!r}{where} is "
                                f"invalid; valid values: {', '.join(policy_names())}")
        return value
    return None


# --- topology name ---------------------------------------------------------------------------------

def _explicit_topology(workload: Mapping, shape: WorkloadShape) -> str | None:
    """kai.scheduler/topology: the pod-template copy wins over the root one; templates must agree."""
    on_templates = {role.annotations[names.TOPOLOGY]: role.field
                    for role in shape.roles if role.annotations.get(names.TOPOLOGY)}
    if len(on_templates) > 1:
        listed = ", ".join(f"{value!r} on {where}" for value, where in on_templates.items())
        raise GroupingError(f"{describe(workload)}: annotation {names.TOPOLOGY} differs between pod "
                            f"templates ({listed}); a gang is placed in one topology, use one value")
    if on_templates:
        return next(iter(on_templates))
    return annotations_of(workload).get(names.TOPOLOGY) or None


# --- per-role decisions ----------------------------------------------------------------------------

def _make_exclusive(constraint: Constraint, exclusive: LevelRef | None) -> Constraint:
    """An exclusive level (a kind's own annotation) is the required one unless another is required."""
    if exclusive is not None:
        constraint.required = constraint.required or exclusive
        constraint.exclusive = True
    return constraint


def _root_constraint(workload: Mapping, kind: WorkloadKind) -> Constraint:
    annotations = annotations_of(workload)
    constraint = Constraint(_level(annotations, names.REQUIRED), _level(annotations, names.PREFERRED))
    exclusive = _level(annotations, kind.exclusive_annotation) if kind.exclusive_annotation else None
    return _make_exclusive(constraint, exclusive)


def _segment_size(workload: Mapping, role: RoleTemplate, rule: SegmentRule,
                  warnings: list[str]) -> tuple[int, str] | None:
    if rule.size is not None:
        return rule.size, rule.size_field
    where = f" on {role.field}"
    for key in (names.SEGMENT_SIZE, names.KUEUE_SLICE_SIZE):
        value = role.annotations.get(key)
        if value is not None:
            size = _int_annotation(workload, key, value, where, 1, None,
                                   f"pods per segment; the {role.name} replicas are {role.replicas}")
            if size > role.replicas:
                # KAI: NumSegments = ceil(replicas / size), the last segment may be shorter
                warnings.append(f"{describe(workload)}: annotation {key}={value}{where} is above the "
                                f"{role.replicas} {role.name} replicas; placed as one segment of {role.replicas}")
            return size, key
    return None


def _segment_constraint(workload: Mapping, role: RoleTemplate, rule: SegmentRule) -> Constraint:
    where = f" on {role.field}"
    annotations = role.annotations
    constraint = Constraint(_level(annotations, names.SEGMENT_REQUIRED, where)
                            or _level(annotations, names.KUEUE_SLICE_REQUIRED, where),
                            _level(annotations, names.SEGMENT_PREFERRED, where))
    exclusive = _level(annotations_of(workload), rule.exclusive) if rule.exclusive else None
    return _make_exclusive(constraint, exclusive)


# the size each segment level needs, as Kueue refuses a slice level without one (a kind's own exclusive
# segment level needs its SegmentRule.size_field, as LWS refuses a subgroup level without subGroupSize)
SIZE_OF_LEVEL = {
    f"annotation {names.SEGMENT_REQUIRED}": f"annotation {names.SEGMENT_SIZE}",
    f"annotation {names.SEGMENT_PREFERRED}": f"annotation {names.SEGMENT_SIZE}",
    f"annotation {names.KUEUE_SLICE_REQUIRED}": f"annotation {names.KUEUE_SLICE_SIZE}",
}


def _sizeless_segment(workload: Mapping, role: RoleTemplate, constraint: Constraint, rule: SegmentRule) -> str:
    ref = constraint.refs()[0]
    return (f"{describe(workload)}: {ref.source}={ref.value!r}{ref.where} needs a segment size: set "
            f"{SIZE_OF_LEVEL.get(ref.source, rule.size_field)} (the number of pods per segment) for the "
            f"{role.name} pods, or remove {ref.source}")


def _role_plan(workload: Mapping, role: RoleTemplate, kind: WorkloadKind, warnings: list[str]) -> RolePlan:
    where = f" on {role.field}"
    constraint = Constraint(_level(role.annotations, names.KUEUE_REQUIRED, where),
                            _level(role.annotations, names.KUEUE_PREFERRED, where))
    rule = kind.segment_rule(workload, role)
    if not rule.segmented:
        return RolePlan(role, constraint, None)
    size = _segment_size(workload, role, rule, warnings)
    segment_constraint = _segment_constraint(workload, role, rule)
    if size is None:
        if segment_constraint.refs():
            raise GroupingError(_sizeless_segment(workload, role, segment_constraint, rule))
        return RolePlan(role, constraint, None)
    if role.index_label is None:
        warnings.append(f"{describe(workload)}: segment annotations on {role.field} ignored: "
                        f"{workload.get('kind')} pods carry no index; set {names.POD_INDEX_LABEL} to the "
                        f"pod label that holds each pod's index")
        return RolePlan(role, constraint, None)
    shift, joined_by = (rule.shift, rule.joined_by) if rule.size is not None else (0, None)
    return RolePlan(role, constraint, SegmentSpec(size[0], segment_constraint, shift, size[1], joined_by))


# annotations read only from a pod template: on the workload's own metadata they would be ignored silently
POD_TEMPLATE_ANNOTATIONS = (names.SEGMENT_SIZE, names.SEGMENT_REQUIRED, names.SEGMENT_PREFERRED,
                            names.KUEUE_SLICE_SIZE, names.KUEUE_SLICE_REQUIRED, names.KUEUE_REQUIRED,
                            names.KUEUE_PREFERRED)


def _warn_misplaced_pod_annotations(workload: Mapping, shape, warnings: list[str]) -> None:
    """A pod-template annotation written on the workload itself: say where it belongs."""
    misplaced = [key for key in POD_TEMPLATE_ANNOTATIONS if key in annotations_of(workload)]
    if not misplaced or not shape.roles:
        return
    fields = ", ".join(f"{role.template_field}.metadata.annotations" for role in shape.roles)
    for key in misplaced:
        warnings.append(f"{describe(workload)}: annotation {key} on the {workload.get('kind')}'s own metadata is "
                        f"ignored; it belongs on the pod template ({fields})")


# --- elasticity ----------------------------------------------------------------------------------

def _total_minimum(workload: Mapping, total: int) -> tuple[int, str] | None:
    value = annotations_of(workload).get(names.BATCH_MIN_MEMBER)
    if value is not None:
        return _int_annotation(workload, names.BATCH_MIN_MEMBER, value, "", 1, total,
                               f"the workload has {total} pods"), f"annotation {names.BATCH_MIN_MEMBER}"
    run_policy = mapping_field(workload, "spec.runPolicy", (workload.get("spec") or {}).get("runPolicy"))
    value = mapping_field(workload, "spec.runPolicy.schedulingPolicy",
                          run_policy.get("schedulingPolicy")).get("minAvailable")
    if value is not None:
        field_name = "spec.runPolicy.schedulingPolicy.minAvailable"
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= total:
            raise invalid(workload, field_name, value, f"expected an integer from 1 to {total} (the workload's pods)")
        return value, field_name
    return None


def _apply_minimums(workload: Mapping, shape: WorkloadShape, plans: list[RolePlan], warnings: list[str]) -> None:
    """Spread the workload minimum onto the elastic role (workers, else the largest role)."""
    if not plans:
        return
    elastic = next((p for p in plans if p.role.name == "worker"), None) or max(plans, key=lambda p: p.role.replicas)
    workers = shape.kind.elastic_workers(workload)
    if workers is not None and elastic.role.name == "worker":
        elastic.minimum = workers
    total = _total_minimum(workload, sum(p.role.replicas for p in plans))
    if total is not None:
        others = sum(p.role.replicas for p in plans if p is not elastic)
        if total[0] < others:
            warnings.append(f"{describe(workload)}: {total[1]}={total[0]} is below the {others} pods of the "
                            f"non-{elastic.role.name} roles; those stay required")
        elastic.minimum = max(0, total[0] - others)
    if elastic.minimum is not None and elastic.minimum >= elastic.role.replicas:
        elastic.minimum = None


# --- topology resolution and validation ----------------------------------------------------------

def _all_refs(root: Constraint, plans: list[RolePlan]) -> list[LevelRef]:
    refs = root.refs()
    for plan in plans:
        refs += plan.constraint.refs()
        if plan.segments:
            refs += plan.segments.constraint.refs()
    return refs


def _is_kai(ref: LevelRef) -> bool:
    return ref.source in KAI_LEVEL_SOURCES


def _drop_levels(constraint: Constraint, keep) -> None:
    if constraint.required is not None and not keep(constraint.required):
        constraint.required, constraint.exclusive = None, False
    if constraint.preferred is not None and not keep(constraint.preferred):
        constraint.preferred = None


def _resolve_topology(workload: Mapping, shape: WorkloadShape, root: Constraint, plans: list[RolePlan],
                      topologies: Mapping[str, TopologyTree] | None, warnings: list[str]) -> str | None:
    explicit = _explicit_topology(workload, shape)
    refs = _all_refs(root, plans)
    if explicit is None and topologies is not None and any(_is_kai(ref) for ref in refs):
        explicit = _topology_of_kai_levels(workload, root, plans, topologies, warnings)
    kai_sized = [p for p in plans if p.segments and p.role.annotations.get(names.SEGMENT_SIZE) is not None]
    if explicit is None and (kai_sized or any(_is_kai(ref) for ref in refs)):
        ignored = sorted({ref.source + ref.where for ref in refs if _is_kai(ref)}
                         | {f"annotation {names.SEGMENT_SIZE} on {p.role.field}" for p in kai_sized})
        warnings.append(f"{describe(workload)}: {', '.join(ignored)} ignored: no {names.TOPOLOGY} names the "
                        f"topology")
        keep = lambda ref: not _is_kai(ref)     # noqa: E731
        _drop_levels(root, keep)
        for plan in plans:
            _drop_levels(plan.constraint, keep)
            if any(plan is sized for sized in kai_sized):
                plan.segments = None
            elif plan.segments:
                _drop_levels(plan.segments.constraint, keep)
        refs = _all_refs(root, plans)
    if explicit is not None or not refs:
        return explicit
    prefer = "kueue" if any("kueue" in ref.source for ref in refs) else ""
    inferred = infer_topology([ref.value for ref in refs], topologies, prefer)
    if inferred is None and topologies:
        listed = ", ".join(str(ref) for ref in refs)
        valid = "; ".join(f"{name}: {', '.join(tree.level_names())}" for name, tree in sorted(topologies.items()))
        raise GroupingError(f"{describe(workload)}: no topology has every level of {listed}; "
                            f"known topologies and levels: {valid}")
    if inferred is None:
        warnings.append(f"{describe(workload)}: no {names.TOPOLOGY}; levels are node labels resolved against "
                        f"the topology that holds them")
    return inferred


def _topology_of_kai_levels(workload: Mapping, root: Constraint, plans: list[RolePlan],
                            topologies: Mapping[str, TopologyTree], warnings: list[str]) -> str | None:
    """KAI levels given without kai.scheduler/topology: the one topology that has every one of them. A
    required level is never dropped (KAI drops it silently): where no topology or several have them, the
    gang is refused with the reason; preferred levels alone are then ignored, with a warning (the caller)."""
    kai = [ref for ref in _all_refs(root, plans) if _is_kai(ref)]
    required = [ref for ref in _required_refs(root, plans) if _is_kai(ref)]
    holding = topologies_with([ref.value for ref in kai], topologies)
    listed = ", ".join(str(ref) for ref in kai)
    if len(holding) == 1:
        warnings.append(f"{describe(workload)}: no {names.TOPOLOGY}; {listed} resolved in topology "
                        f"{holding[0]!r}, the one topology that has {'it' if len(kai) == 1 else 'them'} "
                        f"(set {names.TOPOLOGY}={holding[0]} to say so)")
        return holding[0]
    if required:
        why = f"topologies {', '.join(holding)} all have it" if holding else "no topology has it"
        valid = "; ".join(f"{name}: {', '.join(tree.level_names())}" for name, tree in sorted(topologies.items()))
        raise UnresolvedLevelError(f"{describe(workload)}: {', '.join(str(ref) for ref in required)} is a required level "
                            f"without {names.TOPOLOGY}, and {why}; set {names.TOPOLOGY} to the topology meant "
                            f"(known topologies and levels: {valid or 'none defined'})")
    return None


def _required_refs(root: Constraint, plans: list[RolePlan]) -> list[LevelRef]:
    constraints = [root] + [plan.constraint for plan in plans] + [plan.segments.constraint for plan in plans
                                                                   if plan.segments]
    return [constraint.required for constraint in constraints if constraint.required is not None]


def _validate_levels(workload: Mapping, name: str, root: Constraint, plans: list[RolePlan],
                     topologies: Mapping[str, TopologyTree]) -> None:
    tree = find_topology(workload, name, f"annotation {names.TOPOLOGY}", topologies)
    for ref in _all_refs(root, plans):
        level_index(workload, tree, ref)
    for plan in plans:
        check_not_coarser(workload, tree, plan.constraint.required, root.required, "the workload's required level")
        if plan.segments:
            inner = plan.segments.constraint.required
            check_not_coarser(workload, tree, inner, root.required, "the workload's required level")
            check_not_coarser(workload, tree, inner, plan.constraint.required, f"the {plan.role.name} required level")


# --- building ------------------------------------------------------------------------------------

def _level_value(ref: LevelRef | None) -> str | None:
    return ref.value if ref else None


def _segment_leaves(plan: RolePlan, lead: list[Slot]) -> list[Group]:
    """`lead`: slots of other roles in segment 0 (the LWS leader is in subgroup 0)."""
    role, spec = plan.role, plan.segments
    count = segment_count(role.replicas, spec.size, spec.shift)
    leaves = []
    for i in range(count):
        positions = segment_bounds(role.replicas, spec.size, i, spec.shift)
        extra = lead if i == 0 else []
        if not positions and not extra:
            continue
        minimum = None if plan.minimum is None else segment_min(plan.minimum, i, spec.size, len(positions),
                                                                spec.shift) + len(extra)
        leaves.append(Group(
            name=f"{role.name}-{i}",
            slots=extra + [Slot(role.name, role.index_offset + p) for p in positions],
            min_member=minimum,
            required_level=_level_value(spec.constraint.required),
            preferred_level=_level_value(spec.constraint.preferred),
            exclusive=spec.constraint.exclusive,
            segment=SegmentInfo(role.name, i, spec.size, count)))
    return leaves


def _role_group(plan: RolePlan, lead: list[Slot]) -> Group:
    minimum = None if plan.minimum is None else plan.minimum + len(lead)
    group = Group(name=plan.role.name, min_member=minimum,
                  required_level=_level_value(plan.constraint.required),
                  preferred_level=_level_value(plan.constraint.preferred))
    if plan.segments:
        group.children = _segment_leaves(plan, lead)
    else:
        group.slots = [Slot(plan.role.name, index) for index in plan.role.indexes()]
    return group


def podgroup_name(workload: Mapping, group_index: int | None = None) -> str:
    """The PodGroup name KAI's podgrouper gives a workload: pg-<name>-<uid> (LWS: per group)."""
    metadata = workload.get("metadata") or {}
    parts = ["pg", str(metadata.get("name") or "")]
    if group_index is not None:
        parts.append(str(group_index))
    if metadata.get("uid"):
        parts.append(str(metadata["uid"]))
    return "-".join(parts)


def _priority(shape: WorkloadShape, priority_classes: Sequence[Mapping]) -> tuple[int, str]:
    """spec.priority of the templates, else what their PriorityClass (or the globalDefault one) gives."""
    priority, policy = 0, "PreemptLowerPriority"
    for role in shape.roles:
        if isinstance(role.spec.get("priority"), int):
            priority = role.spec["priority"]
            break
    else:
        for role in shape.roles:
            resolved = class_priority(role.spec, priority_classes)
            if resolved is not None:
                return resolved
    for role in shape.roles:
        if role.spec.get("preemptionPolicy"):
            policy = role.spec["preemptionPolicy"]
            break
    return priority, policy


def _joining_slots(plan: RolePlan, plans: list[RolePlan]) -> list[Slot]:
    """The pods of another role that join this role's segment 0 (the LWS leader in subgroup 0)."""
    joined_by = plan.segments.joined_by if plan.segments else None
    return [Slot(other.role.name, index) for other in plans if other.role.name == joined_by
            for index in other.role.indexes()]


def _tree(workload: Mapping, name: str, root: Constraint, plans: list[RolePlan], topology: str | None,
          strategy: str | None, shape: WorkloadShape, warnings: list[str],
          priority_classes: Sequence[Mapping] = (), group: int | None = None) -> GroupTree:
    leads = {plan.role.name: _joining_slots(plan, plans) for plan in plans}
    joined = {slot.role for slots in leads.values() for slot in slots}
    children = [_role_group(plan, leads[plan.role.name]) for plan in plans if plan.role.name not in joined]
    elastic = any(plan.minimum is not None for plan in plans)
    root_min = sum(plan.role.replicas if plan.minimum is None else plan.minimum for plan in plans)
    root_group = Group(name=name, children=children, min_member=root_min if elastic else None,
                       required_level=_level_value(root.required), preferred_level=_level_value(root.preferred),
                       exclusive=root.exclusive)
    priority, preemption = _priority(shape, priority_classes)
    metadata = workload.get("metadata") or {}
    return GroupTree(
        namespace=metadata.get("namespace") or "default", name=name, kind=str(workload.get("kind")),
        root=root_group,
        roles={p.role.name: RoleSpec(p.role.name, p.role.replicas, p.role.spec, p.role.labels) for p in plans},
        topology=topology, strategy=strategy, priority=priority, preemption_policy=preemption,
        warnings=list(warnings), workload=_workload_label(workload, group))


def _workload_label(workload: Mapping, group: int | None) -> str:
    """The name the user knows: the workload's, with the group of a LeaderWorkerSet."""
    name = str((workload.get("metadata") or {}).get("name") or "")
    return name if group is None else f"{name} (group {group})"


def group_workload(workload: Mapping, topologies: Mapping[str, TopologyTree] | None = None,
                   priority_classes: Sequence[Mapping] = ()) -> list[GroupTree]:
    """The gang(s) of a workload: [] when it does not opt in, one tree per LeaderWorkerSet group.
    `priority_classes`: the cluster's PriorityClass objects, for templates naming a class."""
    shape = workload_shape(workload)
    if not opts_in(workload, shape):
        return []
    check_requests(workload, shape)
    if not shape.roles:
        raise GroupingError(f"{describe(workload)}: no pod template found; expected spec.template, "
                            f"spec.replicatedJobs or a supported kind (Job, kubeflow jobs, LeaderWorkerSet)")
    warnings: list[str] = []
    root = _root_constraint(workload, shape.kind)
    plans = [_role_plan(workload, role, shape.kind, warnings) for role in shape.roles]
    _warn_misplaced_pod_annotations(workload, shape, warnings)
    _apply_minimums(workload, shape, plans, warnings)
    topology = _resolve_topology(workload, shape, root, plans, topologies, warnings)
    if topologies is not None and topology is not None:
        _validate_levels(workload, topology, root, plans, topologies)
    strategy = _strategy(workload, shape)
    if shape.kind.gangs is not None:        # one gang per replica (LeaderWorkerSet groups)
        return [_tree(workload, podgroup_name(workload, g), root, plans, topology, strategy, shape, warnings,
                      priority_classes, group=g) for g in range(shape.groups)]
    return [_tree(workload, podgroup_name(workload), root, plans, topology, strategy, shape, warnings,
                  priority_classes)]
