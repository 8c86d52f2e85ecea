"""StatefulSet: a pod template like any generic kind (index through pod-index-label, e.g. its own
apps.kubernetes.io/pod-index); with OrderedReady (its default) it creates each pod once the one before is
Ready."""
from __future__ import annotations

from collections.abc import Mapping

from . import generic
from .base import WatchedKind, WorkloadKind


def ordered_ready(statefulset: Mapping) -> bool:
    return (statefulset.get("spec") or {}).get("podManagementPolicy") != "Parallel"


STATEFULSET = WorkloadKind(
    "statefulset", ("StatefulSet",), "apps",
    watch=(WatchedKind("apps", "v1", "statefulsets", "StatefulSet", True),),
    roles=generic.roles, pods=generic.pods, one_after_another=ordered_ready,
)
