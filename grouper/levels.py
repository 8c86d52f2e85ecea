"""Topology levels as users wrote them: which topology they refer to, and checks against it."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from topology.tree import LevelError, TopologyTree

from .errors import GroupingError, describe


@dataclass(frozen=True)
class LevelRef:
    """A level name and where it was written (annotation key or field path), for messages."""

    value: str
    source: str          # "annotation kai.scheduler/..." or a field path
    where: str = ""      # " on spec.tfReplicaSpecs.Worker" for a pod-template annotation

    def __str__(self) -> str:
        return f"{self.source}={self.value!r}{self.where}"


def find_topology(obj: Mapping, name: str, source: str,
                  topologies: Mapping[str, TopologyTree]) -> TopologyTree:
    if name in topologies:
        return topologies[name]
    invalid = getattr(topologies, "errors", {}).get(name)       # defined, but could not be built
    if invalid:
        raise GroupingError(f"{describe(obj)}: {source}={name!r} names an invalid topology: {invalid}")
    valid = ", ".join(sorted(topologies)) or "none defined"
    raise GroupingError(f"{describe(obj)}: {source}={name!r} names an unknown topology; "
                        f"valid topologies: {valid}")


def infer_topology(levels: Sequence[str], topologies: Mapping[str, TopologyTree] | None,
                   prefer: str = "") -> str | None:
    """The topology in which every level resolves (Kueue and LWS name node labels, not topologies).
    Topologies whose source contains `prefer` come first, then by name."""
    if not topologies or not levels:
        return None
    ordered = sorted(topologies.values(), key=lambda t: (prefer not in t.source if prefer else False, t.name))
    for tree in ordered:
        try:
            for level in levels:
                tree.level_index(level)
        except LevelError:
            continue
        return tree.name
    return None


def topologies_with(levels: Sequence[str], topologies: Mapping[str, TopologyTree]) -> list[str]:
    """The names of the topologies in which every level resolves, sorted."""
    def resolves(tree: TopologyTree, level: str) -> bool:
        try:
            tree.level_index(level)
        except LevelError:
            return False
        return True
    return sorted(name for name, tree in topologies.items() if all(resolves(tree, level) for level in levels))


def level_index(obj: Mapping, tree: TopologyTree, ref: LevelRef) -> int:
    try:
        return tree.level_index(ref.value)
    except LevelError as err:
        raise GroupingError(f"{describe(obj)}: {ref} is invalid: {err}") from None


def check_not_coarser(obj: Mapping, tree: TopologyTree, inner: LevelRef | None, outer: LevelRef | None,
                      what: str) -> None:
    """`inner` (a segment's or subgroup's required level) must not be coarser than `outer` (the
    required level of the group that contains it)."""
    if inner is None or outer is None:
        return
    if level_index(obj, tree, inner) < level_index(obj, tree, outer):
        finer = ", ".join(level.display for level in tree.levels[level_index(obj, tree, outer):])
        raise GroupingError(
            f"{describe(obj)}: {inner} is coarser than {what} {outer}; a nested level must be "
            f"{outer.value!r} or finer "
            f"(valid: {finer})")
