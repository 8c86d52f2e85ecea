"""Segment arithmetic: a role of R pods split into ceil(R / S) segments of S consecutive indexes.

With a role minimum M, segment i requires clamp(M - i*S, 0, its size) pods: full segments below M are
mandatory, the one straddling M needs only the pods below M, and the ones past M are elastic (0).
"""
from __future__ import annotations


def segment_count(replicas: int, size: int, shift: int = 0) -> int:
    """Segments of a role; `shift` positions of segment 0 are held by pods outside the role (the LWS
    leader in its subgroup 0)."""
    return -(-(replicas + shift) // size) if replicas > 0 else 0


def segment_bounds(replicas: int, size: int, segment: int, shift: int = 0) -> range:
    """Positions (0-based, before any index offset) held by one segment."""
    return range(max(0, segment * size - shift), min((segment + 1) * size - shift, replicas))


def segment_min(minimum: int, segment: int, size: int, length: int, shift: int = 0) -> int:
    """Pods segment `segment` (holding `length` pods) must place when the role needs `minimum`."""
    return max(0, min(minimum - max(0, segment * size - shift), length))
