"""Node facts the planner needs, and which nodes a pod may use (readiness, taints, selectors)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .quantity import resource_units

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    ready: bool = True
    unschedulable: bool = False
    taints: tuple[Mapping, ...] = ()

    @classmethod
    def from_object(cls, obj: Mapping) -> "NodeInfo":
        metadata = _mapping(obj, "metadata", "Node")
        name = metadata.get("name")
        if not name or not isinstance(name, str):
            raise ValueError("Node without metadata.name (a non-empty string)")
        where = f"Node {name!r}"
        spec, status = _mapping(obj, "spec", where), _mapping(obj, "status", where)
        allocatable = (_mapping(status, "allocatable", where, "status.")
                       or _mapping(status, "capacity", where, "status."))
        units = {}
        for resource, value in allocatable.items():
            try:
                units[resource] = resource_units(resource, value)
            except ValueError as err:
                raise ValueError(f"{where} status.allocatable[{resource!r}]: {err}") from err
        return cls(
            name=name,
            # hand-written files may leave label values unquoted (rack: 1); Kubernetes holds strings
            labels={str(k): str(v) for k, v in _mapping(metadata, "labels", where, "metadata.").items()},
            allocatable=units,
            ready=_is_ready(_objects(status, "conditions", where, "status.")),
            unschedulable=bool(spec.get("unschedulable")),
            taints=tuple(t for t in _objects(spec, "taints", where, "spec.") if t.get("effect") in BLOCKING_EFFECTS),
        )


def _mapping(obj: Mapping, field: str, where: str, path: str = "") -> Mapping:
    """obj[field] when it is a mapping ({} when absent); a ValueError naming the field otherwise."""
    value = obj.get(field) or {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} {path}{field}={value!r:.60} is invalid; expected a mapping")
    return value


def _objects(obj: Mapping, field: str, where: str, path: str = "") -> list[Mapping]:
    """obj[field] when it is a list of mappings ([] when absent); a ValueError naming the field otherwise."""
    value = obj.get(field) or []
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise ValueError(f"{where} {path}{field}={value!r:.60} is invalid; expected a list of objects")
    return value


def _is_ready(conditions: Sequence[Mapping]) -> bool:
    """Ready unless a Ready condition says otherwise (hand-written cluster files often omit conditions)."""
    for condition in conditions:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True


def tolerates(tolerations: Sequence[Mapping], taint: Mapping) -> bool:
    """Whether one of the tolerations matches the taint, with Kubernetes' matching rules."""
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        if key and key != taint.get("key"):
            continue
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists":
            return True
        if operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or ""):
            return True        # any other operator tolerates nothing, as in Kubernetes
    return False


def _expression_matches(labels: Mapping[str, str], expression: Mapping) -> bool:
    key, operator = expression.get("key"), expression.get("operator")
    values = expression.get("values") or []
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            node_value, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return node_value > bound if operator == "Gt" else node_value < bound
    return False


def _affinity_matches(node: NodeInfo, spec: Mapping) -> bool:
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    fields = {"metadata.name": node.name}          # the only field matchFields supports
    return any(
        (term.get("matchExpressions") or term.get("matchFields"))    # an empty term matches no node
        and all(_expression_matches(node.labels, e) for e in term.get("matchExpressions") or [])
        and all(_expression_matches(fields, e) for e in term.get("matchFields") or [])
        for term in terms
    )


@dataclass
class PodPlacementRules:
    """What a pod (or a role of a workload) requires of a node besides capacity."""

    tolerations: tuple[Mapping, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    spec: Mapping = field(default_factory=dict)

    @classmethod
    def from_spec(cls, spec: Mapping) -> "PodPlacementRules":
        problem = placement_problem(spec)
        if problem:
            raise ValueError(problem)
        return cls(tuple(spec.get("tolerations") or ()), dict(spec.get("nodeSelector") or {}), spec)

    def allows(self, node: NodeInfo) -> str | None:
        """None when the node is usable, else the reason it is not."""
        if not node.ready:
            return "not ready"
        if node.unschedulable:
            return "unschedulable"
        for taint in node.taints:
            if not tolerates(self.tolerations, taint):
                return f"untolerated taint {taint.get('key')}"
        if any(node.labels.get(k) != v for k, v in self.node_selector.items()):
            return "node selector"
        if not _affinity_matches(node, self.spec):
            return "node affinity"
        return None


def placement_problem(spec: Mapping, where: str = "spec") -> str | None:
    """What makes a pod spec's placement fields (tolerations, nodeSelector, node affinity) unreadable,
    named by its path under `where`; None when fine."""
    if not isinstance(spec, Mapping):
        return f"{where}={spec!r:.60} is invalid; expected a pod spec (a mapping)"
    tolerations = spec.get("tolerations") or []
    if not isinstance(tolerations, list) or not all(isinstance(t, Mapping) for t in tolerations):
        return f"{where}.tolerations={tolerations!r:.60} is invalid; expected a list of objects (key, operator, ...)"
    selector = spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping) or not all(isinstance(v, str) for v in selector.values()):
        return f"{where}.nodeSelector={selector!r:.60} is invalid; expected a map of label: value strings"
    affinity = spec.get("affinity") or {}
    if not isinstance(affinity, Mapping) or not all(isinstance(affinity[k] or {}, Mapping) for k in affinity):
        return (f"{where}.affinity={affinity!r:.60} is invalid; expected a mapping of nodeAffinity, "
                f"podAffinity, podAntiAffinity (each a mapping)")
    return _node_affinity_problem(affinity.get("nodeAffinity") or {}, f"{where}.affinity.nodeAffinity")


def _node_affinity_problem(node_affinity: Mapping, where: str) -> str | None:
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    where += ".requiredDuringSchedulingIgnoredDuringExecution"
    if not isinstance(required, Mapping):
        return f"{where}={required!r:.60} is invalid; expected a mapping with nodeSelectorTerms"
    terms = required.get("nodeSelectorTerms") or []
    if not isinstance(terms, list) or not all(isinstance(t, Mapping) for t in terms):
        return f"{where}.nodeSelectorTerms={terms!r:.60} is invalid; expected a list of objects"
    for i, term in enumerate(terms):
        for part in ("matchExpressions", "matchFields"):
            expressions = term.get(part) or []
            if not isinstance(expressions, list) or not all(
                    isinstance(e, Mapping) and isinstance(e.get("values") or [], list) for e in expressions):
                return (f"{where}.nodeSelectorTerms[{i}].{part}={expressions!r:.60} is invalid; expected a list "
                        f"of objects (key, operator, values: a list)")
    return None


def usable_mask(nodes: Sequence[NodeInfo], rules: PodPlacementRules) -> np.ndarray:
    return np.fromiter((rules.allows(node) is None for node in nodes), dtype=bool, count=len(nodes))


def exclusion_counts(nodes: Sequence[NodeInfo], rules: PodPlacementRules) -> dict[str, int]:
    """How many nodes are excluded for each reason (for refusal explanations)."""
    counts: dict[str, int] = {}
    for node in nodes:
        reason = rules.allows(node)
        if reason:
            counts[reason] = counts.get(reason, 0) + 1
    return counts
