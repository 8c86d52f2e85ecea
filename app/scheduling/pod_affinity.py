"""Required pod affinity and anti-affinity in the plan, as kube-scheduler's InterPodAffinity filter will
judge the nodes (one pod per host among the gang's own pods is the planner's `per_node` limit):
- `together`: a role whose pods attract each other on a topology key lands in one domain of that key (the
  role's group gets that key as its required level when it is finer than the one it has);
- `allowed_by_pods`: a term about pods already running allows (affinity) or excludes
  (anti-affinity) every node of their domains.
- `apart`: a role whose pods repel each other on a rack or block key gets one pod per domain of that level.
Not modelled: the anti-affinity of running pods against the new ones (kube-scheduler still enforces it; a
slot whose node it then drops is re-planned)."""
from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

import numpy as np

from grouper.affinity import HOSTNAME, PodTerm, required_terms, together_keys
from topology.cluster import Cluster
from topology.groups import Group, GroupTree
from topology.tree import TopologyTree

TERMINAL = ("Succeeded", "Failed")


def apart(tree: GroupTree, topology: TopologyTree | None) -> dict[str, str]:
    """Roles whose pods repel each other on a topology level other than the hostname (one pod per rack,
    per block): role -> that level's key. The hostname is the planner's per_node limit."""
    found = {}
    for role, terms in role_terms(tree).items():
        for term in terms:
            if term.anti and term.selects_self and term.topology_key != HOSTNAME and topology is not None \
                    and any(term.topology_key in level.names for level in topology.levels):
                found[role] = term.topology_key
    return found


def role_terms(tree: GroupTree) -> dict[str, tuple[PodTerm, ...]]:
    """Each role's required pod (anti-)affinity terms: from its admitted pod where the service has one (a
    spec carrying `pod_terms`), else from its template and labels (`plan`, `simulate`, a role not seen yet),
    as grouper.node_limit.role_limits reads the per-node limit."""
    found = {}
    for role, spec in tree.roles.items():
        terms = getattr(spec.pod_spec, "pod_terms", None)
        if terms is None:
            terms = required_terms(spec.pod_spec, spec.pod_labels, tree.namespace)
        if terms:
            found[role] = tuple(terms)
    return found


def together(tree: GroupTree, topology: TopologyTree | None) -> GroupTree:
    """`tree` with each self-attracting role's group required in one domain of its affinity key."""
    changes = {}
    for role, terms in role_terms(tree).items():
        for key in together_keys(terms):
            if topology is None or not any(key in level.names for level in topology.levels):
                continue
            group = _role_group(tree.root, role)
            if group is not None and _finer(topology, key, changes.get(group.name, group.required_level)):
                changes[group.name] = key
    if not changes:
        return tree
    tree = copy.deepcopy(tree)
    for group in tree.groups():
        if group.name in changes:
            group.required_level = changes[group.name]
    return tree


def _role_group(group: Group, role: str) -> Group | None:
    """The largest group whose pods are all of `role`."""
    slots = group.all_slots()
    if slots and all(slot.role == role for slot in slots):
        return group
    for child in group.children:
        found = _role_group(child, role)
        if found is not None:
            return found
    return None


def _finer(topology: TopologyTree, key: str, current: str | None) -> bool:
    if current is None:
        return True
    try:
        return topology.level_index(key) > topology.level_index(current)
    except ValueError:
        return False


def allowed_by_pods(cluster: Cluster, tree: GroupTree, pods: Iterable[Mapping]) -> dict[str, tuple[np.ndarray, str]]:
    """Per role with pod (anti-)affinity terms: the nodes those terms allow given the running ones among
    `pods` (bound to a node of the cluster, not finished), and the exclusion reason for the others."""
    result = {}
    terms_of = role_terms(tree)
    if not terms_of:
        return result
    running = _running(cluster, pods)
    for role, terms in terms_of.items():
        mask = np.ones(len(cluster.nodes), dtype=bool)
        for term in terms:
            values = [node.labels.get(term.topology_key) for node in cluster.nodes]
            taken = {values[index] for index, labels, namespace in running
                     if term.matches(labels, namespace) and values[index] is not None}
            in_taken = np.fromiter((v is not None and v in taken for v in values), dtype=bool, count=len(values))
            if term.anti:
                mask &= ~in_taken
            elif taken:
                mask &= in_taken
            elif not term.selects_self:              # nothing to join, and the pod cannot start the group
                mask[:] = False
        result[role] = (mask, "pod affinity")
    return result


def _running(cluster: Cluster, pods: Iterable[Mapping]) -> list[tuple[int, Mapping, str]]:
    """(node index, labels, namespace) of every pod bound to a known node and not finished."""
    index = cluster.node_index
    running = []
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in index or (pod.get("status") or {}).get("phase") in TERMINAL:
            continue
        metadata = pod.get("metadata") or {}
        running.append((index[node], metadata.get("labels") or {}, metadata.get("namespace") or "default"))
    return running
