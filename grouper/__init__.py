"""The PodGrouper: workloads and PodGroups become group trees (topology.groups.GroupTree).

Pure code, no I/O: callers pass the objects (workloads, PodGroups, pods, topology trees) in.
"""
from .errors import GroupingError
from .exclusive import keeps_apart
from .expand import expand_pods
from .identity import UNINDEXED, PodIdentity, identify_pod, podgroup_identities
from .owners import OwnerRef, owner_of
from .podgroups import group_podgroup, validate_podgroup
from .workloads import group_workload, opts_in, podgroup_name

__all__ = [
    "GroupingError", "OwnerRef", "PodIdentity", "UNINDEXED", "expand_pods", "group_podgroup", "group_workload",
    "identify_pod", "keeps_apart", "opts_in", "owner_of", "podgroup_identities", "podgroup_name",
    "validate_podgroup",
]
