"""Required pod anti-affinity among a gang's own pods: a role whose pods repel each other on
kubernetes.io/hostname (one pod per host, common for inference) must get a node per pod, or
kube-scheduler's InterPodAffinity filter drops the nodes the planner doubled up on."""
from __future__ import annotations

from collections.abc import Mapping

HOSTNAME = "kubernetes.io/hostname"


def selects(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against labels (a null selector selects nothing, an empty one everything)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(_expression(labels, e) for e in selector.get("matchExpressions") or [])


def _expression(labels: Mapping[str, str], expression: Mapping) -> bool:
    key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False


def one_per_host(spec: Mapping, labels: Mapping[str, str], namespace: str) -> bool:
    """Whether a required anti-affinity term on the hostname selects the pod itself (so its role's pods
    need one node each)."""
    anti = ((spec.get("affinity") or {}).get("podAntiAffinity") or {})
    for term in anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []:
        if term.get("topologyKey") != HOSTNAME or term.get("namespaceSelector") is not None:
            continue
        namespaces = term.get("namespaces") or [namespace]
        if namespace in namespaces and selects(term.get("labelSelector"), labels):
            return True
    return False
