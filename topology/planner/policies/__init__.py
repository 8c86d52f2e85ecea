"""Placement policies: how the planner chooses among places that all fit (the `kai.scheduler/placement-strategy`
annotation, the service's `--strategy`). Which domains fit is not a policy's business (candidates.fitting):
any order of them gives a valid plan; the policy picks the order, which children of a chosen domain take a
role's pods, and which of two valid plans ranks better.

A policy is one small class in this folder, registered below (or with `register` from outside, as
tests/topology/test_planner_policies.py does): the annotation, `--strategy`, TAS_STRATEGY and the
planner's checks all accept exactly the registered names."""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from ..candidates import Fit
from .binpack import Binpack
from .spread import Spread


@runtime_checkable
class PlacementPolicy(Protocol):
    name: str
    # Whether the planner spends search on keeping room for elastic pods beside their siblings (siblings.py
    # rehearses allotments, elastic.py repacks crowded domains): worth it when domains fill up tight.
    packs_elastic: bool

    def order(self, fit: Fit) -> np.ndarray:
        """Positions in fit.domains (two or more), best first: the order the search tries them."""

    def split(self, room: np.ndarray, need: int) -> tuple[np.ndarray, np.ndarray]:
        """Which children of the chosen domains (positions in `room`, their room for the role, every one
        > 0, in tree order) take how many of `need` pods; when no child holds them all, the fewest that
        do (fill.py). At least `need` pods of room in all is guaranteed."""

    def tightness(self, room):
        """A key for leftover room, lower first (array or int): how plans of the gang rank (rank.py)."""


POLICIES: dict[str, PlacementPolicy] = {}
DEFAULT = "binpack"


def register(policy: PlacementPolicy) -> PlacementPolicy:
    """Add a policy under its name (the value users write); TypeError when it lacks part of the interface."""
    if not isinstance(policy, PlacementPolicy):
        missing = [member for member in ("name", "packs_elastic", "order", "split", "tightness")
                   if not hasattr(policy, member)]
        raise TypeError(f"{type(policy).__name__} is not a PlacementPolicy: it lacks {', '.join(missing)}")
    POLICIES[policy.name] = policy
    return policy


def policy_names() -> tuple[str, ...]:
    return tuple(POLICIES)


def policy_named(name: str) -> PlacementPolicy:
    """The registered policy; ValueError naming the valid ones otherwise."""
    policy = POLICIES.get(name) if isinstance(name, str) else None
    if policy is None:
        raise ValueError(f"strategy {name!r} is not valid; valid strategies: {', '.join(POLICIES)}")
    return policy


register(Binpack())
register(Spread())
