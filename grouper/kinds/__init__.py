"""Workload kinds: one file per kind (its API and watch, how its pods find it, its roles and indexes, its
minimums, the pods its controller creates), each one WorkloadKind (base.py), listed in registry.py. The
service's watched kinds, the grouper's rules and the webhook's list of kinds all come from here."""
from .base import OwnerRef, RoleTemplate, SegmentRule, WatchedKind, WorkloadKind, WorkloadShape
from .fields import (MAX_PODS, annotations_of, check_requests, count_field, mapping_field, parse_int,
                     suspended)
from .lws import KIND as LWS_KIND
from .registry import (KINDS, family_of, kind_named, kind_of, numbering_kinds, owner_of, register, unregister,
                       watched, workload_shape)

__all__ = [
    "KINDS", "LWS_KIND", "MAX_PODS", "OwnerRef", "RoleTemplate", "SegmentRule", "WatchedKind", "WorkloadKind", "WorkloadShape",
    "annotations_of", "check_requests", "count_field", "family_of", "kind_named", "kind_of", "mapping_field",
    "numbering_kinds", "owner_of", "parse_int", "register", "suspended", "unregister", "watched",
    "workload_shape",
]
