"""Whom an exclusive gang keeps away from (LeaderWorkerSet `exclusive-topology`, read as upstream does).

Upstream LWS enforces exclusivity with required pod anti-affinity on `leaderworkerset.sigs.k8s.io/group-key`
(Exists, NotIn its own key): only pods of another LWS group repel it. We read it the same way and extend it
to our own exclusive gangs. DaemonSet pods and unrelated pods do not take a domain from an exclusive gang.
"""
from __future__ import annotations

from collections.abc import Mapping

from topology.groups import GroupTree

from . import names
from .kinds import LWS_KIND


def keeps_apart(tree: GroupTree | None) -> bool:
    """A gang whose pods an exclusive gang must not share a domain with."""
    return tree is not None and (tree.kind == LWS_KIND or any(g.exclusive for g in tree.groups()))


def lws_gang(pod: Mapping) -> str | None:
    """The gang (namespace/name) of a pod of an LWS group, None for any other pod."""
    metadata = pod.get("metadata") or {}
    group = (metadata.get("labels") or {}).get(names.LWS_GROUP_KEY)
    if group is None:
        return None
    name = (metadata.get("annotations") or {}).get(names.KAI_PODGROUP_ANNOTATION) or group
    return f"{metadata.get('namespace') or 'default'}/{name}"


def apart_owner(pod: Mapping | None, gang: str | None = None, tree: GroupTree | None = None) -> str | None:
    """Whose pod this is for an exclusive gang that meets it (None: nobody's, it takes no domain): its own
    gang's (`gang`, planned as `tree`) when that gang keeps apart, else its LWS group's. The one rule the
    service and the offline tools mark pods by (topology.Cluster.apart)."""
    if gang is not None and keeps_apart(tree):
        return gang
    return lws_gang(pod or {})
