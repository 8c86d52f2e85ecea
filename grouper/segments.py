"""Segment arithmetic: a role of R pods split into ceil(R / S) segments of S consecutive indexes.

With a role minimum M, segment i requires clamp(M - i*S, 0, its size) pods: full segments below M are
mandatory, the one straddling M needs only the pods below M, and the ones past M are elastic (0).
"""
from __future__ import annotations


def segment_count(replicas: int, size: int) -> int:
    return -(-replicas // size) if replicas > 0 else 0


def segment_bounds(replicas: int, size: int, segment: int) -> range:
    """Positions (0-based, before any index offset) held by one segment."""
    return range(segment * size, min((segment + 1) * size, replicas))


def segment_of(position: int, size: int) -> tuple[int, int]:
    """(segment index, rank inside the segment) of a 0-based position."""
    return divmod(position, size)


def segment_min(minimum: int, segment: int, size: int, length: int) -> int:
    """Pods segment `segment` (holding `length` pods) must place when the role needs `minimum`."""
    return max(0, min(minimum - segment * size, length))
