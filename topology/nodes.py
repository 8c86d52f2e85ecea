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
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        allocatable = status.get("allocatable") or status.get("capacity") or {}
        name = metadata.get("name")
        if not name:
            raise ValueError("Node without metadata.name")
        units = {}
        for resource, value in allocatable.items():
            try:
                units[resource] = resource_units(resource, value)
            except ValueError as err:
                raise ValueError(f"Node {name!r} status.allocatable[{resource!r}]: {err}") from err
        return cls(
            name=name,
            # hand-written files may leave label values unquoted (rack: 1); Kubernetes holds strings
            labels={str(k): str(v) for k, v in (metadata.get("labels") or {}).items()},
            allocatable=units,
            ready=_is_ready(status),
            unschedulable=bool(spec.get("unschedulable")),
            taints=tuple(t for t in spec.get("taints") or [] if t.get("effect") in BLOCKING_EFFECTS),
        )


def _is_ready(status: Mapping) -> bool:
    """Ready unless a Ready condition says otherwise (hand-written cluster files often omit conditions)."""
    for condition in status.get("conditions") or []:
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
