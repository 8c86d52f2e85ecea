"""Required pod affinity and anti-affinity, as kube-scheduler's InterPodAffinity filter reads them, so the
plan never picks a node that filter drops:
- a role whose pods repel each other on kubernetes.io/hostname (one pod per host, common for inference)
  gets a node per pod (grouper.node_limit);
- a role whose pods attract each other on a topology key lands in one domain of that key;
- terms about pods already running (the gang's own bound pods included) allow or exclude whole domains.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .names import HOSTNAME  # noqa: F401 - the webhook and the engine take it from here


def selects(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against labels (a null selector selects nothing, an empty one everything)."""
    if not isinstance(selector, Mapping):
        return False
    for key, value in _mapping(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    return all(_expression(labels, _mapping(e)) for e in _list(selector.get("matchExpressions")))


# Terms and selectors of a malformed spec (a workload file, a hand-made request) select nothing here; the
# field is named by the check that reads it for placement (topology.nodes) or by the API server.
def _mapping(value) -> Mapping:
    return value if isinstance(value, Mapping) else {}


def _list(value) -> list:
    return value if isinstance(value, list) else []


def mappings(value) -> list[Mapping]:
    """The mappings of a list field (the terms, constraints, containers or ports of a spec); [] when it
    is not a list."""
    return [item for item in _list(value) if isinstance(item, Mapping)]


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


@dataclass(frozen=True)
class PodTerm:
    """One required (anti-)affinity term of a pod."""

    anti: bool
    topology_key: str
    selector: Mapping
    namespaces: frozenset[str] | None     # None: every namespace (an empty namespaceSelector)
    selects_self: bool                     # the term matches the pod's own labels and namespace

    def matches(self, labels: Mapping[str, str], namespace: str) -> bool:
        return (self.namespaces is None or namespace in self.namespaces) and selects(self.selector, labels)


def required_terms(spec: Mapping, labels: Mapping[str, str], namespace: str) -> tuple[PodTerm, ...]:
    """The pod's required podAffinity / podAntiAffinity terms. Terms with a non-empty namespaceSelector
    are left out: namespaces' labels are not watched (kube-scheduler still applies them)."""
    terms = []
    for anti, field in ((False, "podAffinity"), (True, "podAntiAffinity")):
        for term in mappings(_mapping(_mapping(spec.get("affinity")).get(field)).get(
                "requiredDuringSchedulingIgnoredDuringExecution")):
            key, selector = term.get("topologyKey"), term.get("labelSelector")
            namespace_selector = term.get("namespaceSelector")
            if not key or selector is None or namespace_selector:
                continue
            if namespace_selector is not None:                   # {}: every namespace
                namespaces = None
            else:
                namespaces = frozenset(term.get("namespaces") or [namespace])
            found = PodTerm(anti, key, selector, namespaces, False)
            terms.append(PodTerm(anti, key, selector, namespaces, found.matches(labels, namespace)))
    return tuple(terms)


def together_keys(terms: tuple[PodTerm, ...]) -> tuple[str, ...]:
    """Topology keys on which the role's pods must share one domain (affinity terms selecting itself)."""
    return tuple(t.topology_key for t in terms if not t.anti and t.selects_self)
