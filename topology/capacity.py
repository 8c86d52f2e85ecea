"""Node x resource integer matrices: allocatable, used by bound pods, reserved by plans, and free."""
from __future__ import annotations

import numpy as np


class Capacity:
    """free = allocatable - used - reserved, kept up to date row by row (no rebuild on pod events)."""

    def __init__(self, allocatable: np.ndarray):
        self.allocatable = np.asarray(allocatable, dtype=np.int64)
        self.used = np.zeros_like(self.allocatable)
        self.reserved = np.zeros_like(self.allocatable)
        self.free = self.allocatable.copy()

    @property
    def shape(self) -> tuple[int, int]:
        return self.allocatable.shape

    def use(self, node: int, request: np.ndarray, sign: int = 1) -> None:
        self.used[node] += sign * request
        self.free[node] -= sign * request

    def set_allocatable(self, node: int, row: np.ndarray) -> None:
        """A node's allocatable changed in place (its DRA devices): free follows by the difference."""
        self.free[node] += row - self.allocatable[node]
        self.allocatable[node] = row

    def reserve(self, node: int, request: np.ndarray, sign: int = 1) -> None:
        self.reserved[node] += sign * request
        self.free[node] -= sign * request

    def reserve_many(self, nodes: np.ndarray, requests: np.ndarray) -> None:
        np.add.at(self.reserved, nodes, requests)
        np.subtract.at(self.free, nodes, requests)

    def snapshot(self) -> np.ndarray:
        """A private copy of the free matrix for what-if planning."""
        return self.free.copy()

    def nbytes(self) -> int:
        return self.allocatable.nbytes + self.used.nbytes + self.reserved.nbytes + self.free.nbytes
