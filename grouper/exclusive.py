"""Whom an exclusive gang keeps away from: gangs that are exclusive themselves, and whatever a kind says of
its own (grouper/kinds/: `always_apart`, `apart_gang`). LeaderWorkerSet's part is read as upstream does:
required pod anti-affinity on `leaderworkerset.sigs.k8s.io/group-key` (Exists, NotIn its own key), so only
pods of another LWS group repel it. DaemonSet pods and unrelated pods do not take a domain from an exclusive
gang."""
from __future__ import annotations

from collections.abc import Mapping

from topology.groups import GroupTree

from .kinds.registry import always_apart, apart_gang


def keeps_apart(tree: GroupTree | None) -> bool:
    """A gang whose pods an exclusive gang must not share a domain with."""
    return tree is not None and (always_apart(tree.kind) or any(g.exclusive for g in tree.groups()))


def apart_owner(pod: Mapping | None, gang: str | None = None, tree: GroupTree | None = None) -> str | None:
    """Whose pod this is for an exclusive gang that meets it (None: nobody's, it takes no domain): its own
    gang's (`gang`, planned as `tree`) when that gang keeps apart, else the gang its kind's labels name
    (an LWS group's). The one rule the service and the offline tools mark pods by (topology.Cluster.apart)."""
    if gang is not None and keeps_apart(tree):
        return gang
    return apart_gang(pod or {})
