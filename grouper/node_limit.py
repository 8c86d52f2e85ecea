"""How many pods of a role one node may hold whatever its room, as kube-scheduler's filters decide it. A plan
that put more there would have its node dropped by kube-scheduler and the gang left half bound:
- InterPodAffinity: a required anti-affinity term on the hostname that selects the pod itself: one;
- NodePorts: a host port (a hostNetwork pod's container ports are its host ports): one;
- PodTopologySpread: a `DoNotSchedule` constraint on the hostname whose selector selects the pod itself:
  maxSkew. The skew counts from the node with the fewest of the pods, which holds none as long as the
  gang has fewer pods than the cluster has eligible nodes; a larger gang is held to maxSkew anyway.
Pods of other workloads are not counted here (host ports they hold, pods of the spread's selector).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from topology.groups import GroupTree

from .affinity import HOSTNAME, mappings, required_terms, selects


@dataclass(frozen=True)
class NodeLimit:
    pods: int           # the most pods of the role on one node
    why: str            # the filter, for refusals ("host port 23456/TCP")


def node_limit(spec: Mapping, labels: Mapping[str, str], namespace: str) -> NodeLimit | None:
    """The tightest of the limits above for a pod with this spec, labels and namespace (None: no limit)."""
    limits = [limit for limit in (_anti_affinity(spec, labels, namespace), _host_ports(spec),
                                  _topology_spread(spec, labels)) if limit is not None]
    return min(limits, key=lambda limit: limit.pods, default=None)


_UNKNOWN = object()


def role_limits(tree: GroupTree) -> dict[str, NodeLimit]:
    """The limited roles of a gang: from a role's admitted pod where the service has one (a spec carrying
    `node_limit`), else from its template (or its PodGroup's first pod) and their labels."""
    limits = {}
    for role, spec in tree.roles.items():
        limit = getattr(spec.pod_spec, "node_limit", _UNKNOWN)
        if limit is _UNKNOWN:
            limit = node_limit(spec.pod_spec, spec.pod_labels, tree.namespace)
        if limit is not None:
            limits[role] = limit
    return limits


def limits_per_node(tree: GroupTree) -> dict[str, int]:
    """role_limits as the planner takes them (PlanInput.per_node)."""
    return {role: limit.pods for role, limit in role_limits(tree).items()}


def _anti_affinity(spec: Mapping, labels: Mapping[str, str], namespace: str) -> NodeLimit | None:
    if any(t.anti and t.selects_self and t.topology_key == HOSTNAME for t in required_terms(spec, labels, namespace)):
        return NodeLimit(1, f"required pod anti-affinity on {HOSTNAME}")
    return None


def host_ports(spec: Mapping) -> list[str]:
    """The pod's host ports as `port/protocol`; a hostNetwork pod's container ports are host ports (the
    API server defaults hostPort to containerPort)."""
    found = []
    host_network = spec.get("hostNetwork") is True
    for list_name in ("initContainers", "containers"):
        for container in mappings(spec.get(list_name)):
            for port in mappings(container.get("ports")):
                number = port.get("hostPort") or (port.get("containerPort") if host_network else None)
                if isinstance(number, int) and not isinstance(number, bool) and number > 0:
                    found.append(f"{number}/{port.get('protocol') or 'TCP'}")
    return found


def _host_ports(spec: Mapping) -> NodeLimit | None:
    ports = host_ports(spec)
    return NodeLimit(1, f"host port {', '.join(sorted(set(ports)))}") if ports else None


def _hard_spreads(spec: Mapping, labels: Mapping[str, str]) -> list[Mapping]:
    """The pod's `DoNotSchedule` topology spread constraints whose selector selects the pod itself
    (matchLabelKeys add the pod's own values to the selector: it still selects the pod)."""
    return [constraint for constraint in mappings(spec.get("topologySpreadConstraints"))
            if constraint.get("whenUnsatisfiable") == "DoNotSchedule"
            and selects(constraint.get("labelSelector"), labels)]


def _topology_spread(spec: Mapping, labels: Mapping[str, str]) -> NodeLimit | None:
    skews = [c.get("maxSkew") for c in _hard_spreads(spec, labels) if c.get("topologyKey") == HOSTNAME]
    skews = [skew for skew in skews if isinstance(skew, int) and not isinstance(skew, bool) and skew >= 1]
    if not skews:
        return None
    return NodeLimit(min(skews), f"topology spread on {HOSTNAME}, maxSkew {min(skews)}")


def unmodelled_spreads(spec: Mapping, labels: Mapping[str, str]) -> list[str]:
    """Topology keys of `DoNotSchedule` spread constraints selecting the pod on keys other than the
    hostname: kube-scheduler spreads such pods over every domain of the key, which a gang kept in one
    domain cannot satisfy, and the plan does not model it."""
    keys = [constraint.get("topologyKey") for constraint in _hard_spreads(spec, labels)]
    return [key for key in keys if isinstance(key, str) and key != HOSTNAME]

