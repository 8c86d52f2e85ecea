"""A topology as arrays: for each level a node -> domain index array and a domain -> parent array.

Levels run from the coarsest (index 0, e.g. zone) to the finest (e.g. rack or hostname). Nodes sit one
step below the finest level; a virtual root sits one step above level 0, so hop distances are defined
between any two members. Domain ids are the path of values from the top ("zone-a/block-1/rack-2"), so
equal values under different parents are different domains. Within a level, domains are ordered by
parent, then by value in natural order (rack-2 before rack-10), so the children of a domain are adjacent.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

HOSTNAME_LABEL = "kubernetes.io/hostname"


class LevelError(ValueError):
    """A level name that is unknown or ambiguous in a topology."""


@dataclass(frozen=True)
class Level:
    key: str                     # node label, or the tier ("tier-2") for Volcano HyperNodes
    alias: str | None = None     # a short name users may write instead (kai alias, tierName)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.key,) + ((self.alias,) if self.alias and self.alias != self.key else ())

    @property
    def display(self) -> str:
        return self.alias or self.key


_DIGITS = re.compile(r"[0-9]+")


def _number(match: re.Match) -> str:
    digits = match.group().lstrip("0") or "0"
    return f"\0{len(digits):c}{digits}"          # shorter numbers first, then digit by digit


def _natural_key(text: str) -> str:
    """Sorts like rack-2 < rack-10 (numbers by value). A string key compares much faster than a list;
    the text itself breaks ties such as rack-01 / rack-1, so the order never depends on set order."""
    return _DIGITS.sub(_number, text) + "\0\0" + text


class TopologyTree:
    """One topology over the cluster's node list (global node order, shared by every topology)."""

    def __init__(self, name: str, source: str, levels: Sequence[Level],
                 node_names: Sequence[str], paths: Sequence[Sequence[str] | None],
                 excluded: dict[str, str] | None = None):
        if not levels:
            raise LevelError(f"topology {name!r} has no levels")
        self.name = name
        self.source = source
        self.levels: tuple[Level, ...] = tuple(levels)
        self.node_names = list(node_names)
        self.excluded: dict[str, str] = dict(excluded or {})   # node name -> why it is not a member
        depth = len(self.levels)
        self.member = np.fromiter((p is not None for p in paths), dtype=bool, count=len(paths))
        self.node_domain: list[np.ndarray] = []
        self.parent: list[np.ndarray] = []
        self.domain_ids: list[list[str]] = []
        self.domain_index: list[dict[str, int]] = []
        members = np.flatnonzero(self.member)
        member_paths = [paths[i] for i in members]
        above = np.zeros(len(members), dtype=np.int64)     # each member's domain one level up
        above_ids: list[str] = []
        for level in range(depth):
            # Domains sort by their parent, then by value in natural order: children stay together.
            values = [path[level] for path in member_paths]
            ranked = sorted(set(values), key=_natural_key)
            rank = {value: i for i, value in enumerate(ranked)}
            codes = np.fromiter((rank[v] for v in values), dtype=np.int64, count=len(values))
            width = max(len(ranked), 1)
            keys, inverse = np.unique(above * width + codes, return_inverse=True)
            parents, value_codes = (keys // width).tolist(), (keys % width).tolist()
            if level == 0:
                unique = [ranked[c] for c in value_codes]
                parent = np.full(len(keys), -1, dtype=np.int32)
            else:
                unique = [f"{above_ids[p]}/{ranked[c]}" for p, c in zip(parents, value_codes)]
                parent = np.asarray(parents, dtype=np.int32).reshape(len(keys))
            node_domain = np.full(len(paths), -1, dtype=np.int32)
            node_domain[members] = inverse.reshape(len(members))
            self.node_domain.append(node_domain)
            self.parent.append(parent)
            self.domain_ids.append(unique)
            self.domain_index.append({domain_id: i for i, domain_id in enumerate(unique)})
            above, above_ids = inverse.reshape(len(members)).astype(np.int64), unique

    # --- names -------------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return len(self.levels)

    def level_names(self) -> list[str]:
        return [name for level in self.levels for name in level.names]

    def level_index(self, name: str) -> int:
        """The level called `name` (node label, alias or tier name); an error lists the valid names."""
        found = [i for i, level in enumerate(self.levels) if name in level.names]
        if len(found) == 1:
            return found[0]
        valid = ", ".join(self.level_names())
        if not found:
            raise LevelError(f"unknown level {name!r} in topology {self.name!r}; valid levels: {valid}")
        raise LevelError(f"ambiguous level {name!r} in topology {self.name!r}; valid levels: {valid}")

    def domain_count(self, level: int) -> int:
        return len(self.domain_ids[level])

    def domain_value(self, level: int, domain: int) -> str:
        return self.domain_ids[level][domain].rsplit("/", 1)[-1]

    def node_path(self, node: int) -> list[str] | None:
        """The domain value at every level for one node (None for a non-member)."""
        if not self.member[node]:
            return None
        return [self.domain_value(level, int(self.node_domain[level][node])) for level in range(self.depth)]

    # --- structure -------------------------------------------------------------------------------
    def ancestor(self, level: int, domain: int, at: int) -> int:
        """The domain at coarser level `at` that contains `domain` of `level`."""
        while level > at:
            domain = int(self.parent[level][domain])
            level -= 1
        return domain

    def children_of(self, level: int, domain: int) -> np.ndarray:
        """Domains of level+1 inside `domain` (or the nodes inside it when level is the finest)."""
        if level + 1 < self.depth:
            return np.flatnonzero(self.parent[level + 1] == domain)
        return np.flatnonzero(self.node_domain[level] == domain)

    def nodes_in(self, level: int, domain: int) -> np.ndarray:
        return np.flatnonzero(self.node_domain[level] == domain)
