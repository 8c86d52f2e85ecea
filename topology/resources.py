"""Resource columns of the capacity matrices and a pod's effective request."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from .quantity import QuantityError, resource_units

BASE_RESOURCES = ("cpu", "memory", "pods")
POD_LEVEL_RESOURCES = ("cpu", "memory")            # and every hugepages-<size>


class RequestError(ValueError):
    """A pod spec whose resource requests cannot be read; the message names the field."""


def container_requests(container: Mapping, path: str = "container") -> dict[str, int]:
    """Requests of one container; a resource with only a limit requests its limit (API server defaulting)."""
    if not isinstance(container, Mapping):
        raise RequestError(f"{path}={container!r} is invalid; expected a container (a mapping)")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise RequestError(f"{path}.resources={resources!r} is invalid; expected requests and limits")
    merged: dict = {}
    for part in ("limits", "requests"):          # requests win over limits
        amounts = resources.get(part) or {}
        if not isinstance(amounts, Mapping):
            raise RequestError(f"{path}.resources.{part}={amounts!r} is invalid; expected resource name: quantity")
        merged.update(amounts)
    units = {}
    for name, value in merged.items():
        try:
            units[name] = resource_units(name, value)
        except QuantityError as err:
            raise QuantityError(f"{path}.resources ({name}): {err}") from None
    return units


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, 0) + value


def _max(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, value in more.items():
        into[name] = max(into.get(name, 0), value)


def _pod_level_resource(name: str) -> bool:
    return name in POD_LEVEL_RESOURCES or name.startswith("hugepages-")


def pod_level_requests(spec: Mapping, containers: Mapping[str, int]) -> dict[str, int]:
    """The pod-level requests (`spec.resources`, PodLevelResources: on by default since v1.34) that stand for
    the containers' sum of CPU, memory and hugepages. A pod-level limit counts as the request of a resource
    that neither the pod nor any container requests, as the API server's defaulting makes it."""
    resources = spec.get("resources")
    if not resources:
        return {}
    if not isinstance(resources, Mapping):
        raise RequestError(f"spec.resources={resources!r:.60} is invalid; expected requests and limits")
    requests = container_requests({"resources": {"requests": resources.get("requests") or {}}}, "spec")
    limits = container_requests({"resources": {"limits": resources.get("limits") or {}}}, "spec")
    pod_level = {name: value for name, value in limits.items() if name not in containers}
    pod_level.update(requests)
    return {name: value for name, value in pod_level.items() if _pod_level_resource(name)}


def pod_requests(spec: Mapping) -> dict[str, int]:
    """Effective request of a pod spec, as the scheduler computes it.

    max(sum of containers + restartable init containers (sidecars), each init container together with
    the sidecars started before it), with pod-level requests in its place where set, + overhead, and one
    `pods` slot.
    """
    for list_name in ("containers", "initContainers"):
        if not isinstance(spec.get(list_name) or [], list):
            raise RequestError(f"spec.{list_name}={spec[list_name]!r:.60} is invalid; expected a list of containers")
    total: dict[str, int] = {}
    for i, container in enumerate(spec.get("containers") or []):
        _add(total, container_requests(container, f"spec.containers[{i}]"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(spec.get("initContainers") or []):
        requests = container_requests(container, f"spec.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            _add(sidecars, requests)
            _max(init_peak, sidecars)
        else:
            with_sidecars = dict(sidecars)
            _add(with_sidecars, requests)
            _max(init_peak, with_sidecars)
    _add(total, sidecars)
    _max(total, init_peak)
    total.update(pod_level_requests(spec, total))
    _add(total, container_requests({"resources": {"requests": spec.get("overhead") or {}}}, "spec.overhead"))
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
