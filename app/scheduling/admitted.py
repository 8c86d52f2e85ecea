"""The gang as admitted: admission changes pods after the template (ExtendedResourceToleration adds GPU
tolerations, LimitRanger fills default requests, webhooks add selectors). The first pod of a role that
reaches the filter tells the role's true shape, even when it was only told to wait for the rest of its
gang; the planner sizes that role's slots and filters its nodes from it. A later pod whose shape differs
from its role's makes the gang re-plan."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace

from grouper.affinity import required_terms
from grouper.node_limit import node_limit
from topology.dra_requests import podgroup_claims
from topology.groups import GroupTree, RoleSpec
from topology.resources import pod_requests


class AdmittedSpec(dict):
    """A role's pod spec taken from a pod the API server admitted (not from the template).
    `node_limit`: the most of its pods one node may hold whatever its room (grouper.node_limit), or None;
    `pod_terms`: its required pod (anti-)affinity terms (grouper.affinity.PodTerm)."""
    node_limit = None
    pod_terms: tuple | None = None       # None: not read yet (role_terms reads the spec then)
    shape: tuple | None = None            # shape(self), kept: a planned role's spec is compared per pod


def shape(spec: Mapping) -> tuple:
    """What placement depends on: requests, tolerations, node selector and node affinity (pod affinity
    may name the pod's own group, so it differs between pods of one role)."""
    known = getattr(spec, "shape", None)
    if known is not None:
        return known
    found = (sorted(pod_requests(spec).items()), repr(spec.get("tolerations") or []),
             sorted((spec.get("nodeSelector") or {}).items()), repr((spec.get("affinity") or {}).get("nodeAffinity")),
             getattr(spec, "node_limit", None))
    if isinstance(spec, AdmittedSpec):
        spec.shape = found
    return found


class SeenRoles:
    """The first pod of each role of a gang that reached the filter, kept until the gang is planned (a
    plan keeps the shapes in its tree). Bounded: the oldest gangs are forgotten first."""

    def __init__(self, limit: int = 10_000):
        self._gangs: OrderedDict[str, dict[str, Mapping]] = OrderedDict()
        self.limit = limit

    def remember(self, gang: str, role: str, pod: Mapping) -> None:
        roles = self._gangs.setdefault(gang, {})
        self._gangs.move_to_end(gang)
        roles.setdefault(role, pod)
        while len(self._gangs) > self.limit:
            self._gangs.popitem(last=False)

    def roles(self, gang: str) -> dict[str, Mapping]:
        return dict(self._gangs.get(gang, {}))


def admitted_tree(tree: GroupTree, planned: GroupTree | None, role: str, pod: Mapping) -> GroupTree:
    """`tree` (from the workload) with the roles already admitted in `planned` and `role` from `pod`."""
    roles = dict(tree.roles)
    if planned is not None:
        for name, spec in planned.roles.items():
            if name in roles and isinstance(spec.pod_spec, AdmittedSpec):
                roles[name] = replace(roles[name], pod_spec=spec.pod_spec)
    spec = AdmittedSpec(pod.get("spec") or {})
    spec.pop("nodeName", None)
    if role in tree.podgroup_claims:            # the claims its native PodGroup shares (DRAWorkloadResourceClaims)
        spec["resourceClaims"] = podgroup_claims(tree.podgroup_claims[role], spec)["resourceClaims"]
    metadata = pod.get("metadata") or {}
    labels, namespace = metadata.get("labels") or {}, metadata.get("namespace") or "default"
    spec.pod_terms = required_terms(spec, labels, namespace)
    spec.node_limit = node_limit(spec, labels, namespace)
    current = roles.get(role)
    if current is None:
        current = RoleSpec(role, sum(slot.role == role for slot in tree.slots()))
    roles[role] = replace(current, pod_spec=spec)
    return replace(tree, roles=roles, **_admitted_priority(tree, spec))


def _admitted_priority(tree: GroupTree, spec: Mapping) -> dict:
    """The priority the Priority admission plugin set on the pod (from its priorityClassName or the
    globalDefault class); the template only carries the class name."""
    priority = spec.get("priority")
    if not isinstance(priority, int) or isinstance(priority, bool) or tree.priority_from_group:
        return {}
    return {"priority": priority, "preemption_policy": spec.get("preemptionPolicy") or tree.preemption_policy}


def differs(planned: GroupTree, tree: GroupTree) -> list[str]:
    """Roles whose shape in `tree` is not the one `planned` was planned with."""
    return [role for role in tree.roles if planned.pod_spec(role) is not tree.pod_spec(role)
            and shape(planned.pod_spec(role)) != shape(tree.pod_spec(role))]
