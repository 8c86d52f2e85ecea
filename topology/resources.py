"""Resource columns of the capacity matrices and a pod's effective request."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from .quantity import resource_units

BASE_RESOURCES = ("cpu", "memory", "pods")


def container_requests(container: Mapping) -> dict[str, int]:
    """Requests of one container; a resource with only a limit requests its limit (API server defaulting)."""
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: resource_units(name, value) for name, value in merged.items()}


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, 0) + value


def _max(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, value in more.items():
        into[name] = max(into.get(name, 0), value)


def pod_requests(spec: Mapping) -> dict[str, int]:
    """Effective request of a pod spec, as the scheduler computes it.

    max(sum of containers + restartable init containers (sidecars), each init container together with
    the sidecars started before it) + overhead, and one `pods` slot.
    """
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        _add(total, container_requests(container))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or []:
        requests = container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(sidecars, requests)
            _max(init_peak, sidecars)
        else:
            with_sidecars = dict(sidecars)
            _add(with_sidecars, requests)
            _max(init_peak, with_sidecars)
    _add(total, sidecars)
    _max(total, init_peak)
    overhead = spec.get("overhead") or {}
    _add(total, {name: resource_units(name, value) for name, value in overhead.items()})
    total["pods"] = total.get("pods", 0) + 1
    return {name: value for name, value in total.items() if value}


class ResourceIndex:
    """The column of each resource name in the node x resource matrices."""

    def __init__(self, names: Iterable[str]):
        ordered = list(BASE_RESOURCES) + sorted(set(names) - set(BASE_RESOURCES))
        self.names: tuple[str, ...] = tuple(ordered)
        self.column = {name: i for i, name in enumerate(self.names)}

    def __len__(self) -> int:
        return len(self.names)

    def vector(self, amounts: Mapping[str, int]) -> np.ndarray:
        """Amounts as a row; resources without a column are dropped (see `unknown`)."""
        row = np.zeros(len(self.names), dtype=np.int64)
        for name, value in amounts.items():
            if name in self.column:
                row[self.column[name]] = value
        return row

    def unknown(self, amounts: Mapping[str, int]) -> list[str]:
        """Requested resources that no node offers."""
        return sorted(name for name, value in amounts.items() if value and name not in self.column)

    def as_dict(self, row: np.ndarray) -> dict[str, int]:
        return {name: int(row[i]) for i, name in enumerate(self.names) if row[i]}
