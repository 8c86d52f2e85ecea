"""Devices published through Dynamic Resource Allocation (resource.k8s.io), counted per node and DeviceClass.

Per node and class: the devices of the node's ResourceSlices (`spec.nodeName`; `nodeSelector` / `allNodes`
slices on every node they select; only the newest `spec.pool.generation` of a pool) that match the class's
CEL selectors. Allocated claims (`status.allocation.devices.results`) make their devices used, once per claim.
Partitionable devices (`sharedCounters` / `consumesCounters`, as MIG): a device is free only while the
counters of its pool allow it; the free devices of a class are counted by taking them greedily in name order.

The counts become columns of the node x resource matrices (topology/cluster.py): one per class (named after
the class), and, on a node whose allocatable lacks it, the class's `extendedResourceName`.
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import cel

from .nodes import NodeInfo, _expression_matches
from .quantity import QuantityError, parse_quantity

# --- CEL: the DRA environment (device.driver, device.attributes, device.capacity, quantity(), semver()) ----

def _quantity(text):
    try:
        return int(parse_quantity(text) * 1000)          # milli-units: quantities compare as integers
    except (QuantityError, TypeError, ValueError) as err:
        raise ValueError(f"quantity({text!r}): {err}") from None


def _semver(text):
    parts = str(text).split("-", 1)[0].split("+", 1)[0].split(".")
    try:
        return [int(p) for p in parts] + [0] * (3 - len(parts))
    except ValueError:
        raise ValueError(f"semver({text!r}): not a semantic version") from None


def _compare_to(a, b) -> int:
    return (a > b) - (a < b)


CEL_FUNCTIONS = {
    "quantity": _quantity, "semver": _semver, "compareTo": _compare_to,
    "isGreaterThan": lambda a, b: a > b, "isLessThan": lambda a, b: a < b,
    "major": lambda v: v[0], "minor": lambda v: v[1], "patch": lambda v: v[2],
}


def _attribute_value(value: Mapping):
    for key in ("string", "int", "bool"):
        if key in value:
            return value[key]
    if "version" in value:
        return _semver(value["version"])
    raise ValueError(f"attribute value {value!r:.60} is invalid; expected one of string, int, bool, version")


def _qualified(name: str, driver: str) -> tuple[str, str]:
    domain, _, short = name.rpartition("/")
    return (domain or driver), short


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    attributes: Mapping        # domain -> name -> value, as CEL sees them
    capacity: Mapping          # domain -> name -> milli-units
    consumes: tuple[tuple[str, Mapping[str, int]], ...] = ()    # (counter set, counter -> amount)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.driver, self.pool, self.name

    def cel_value(self) -> dict:
        return {"driver": self.driver, "attributes": self.attributes, "capacity": self.capacity}


def _device(raw: Mapping, driver: str, pool: str, where: str) -> Device:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.name is required (a non-empty string)")
    attributes: dict[str, dict] = {driver: {}}
    for attr, value in (raw.get("attributes") or {}).items():
        domain, short = _qualified(attr, driver)
        try:
            attributes.setdefault(domain, {})[short] = _attribute_value(value or {})
        except ValueError as err:
            raise ValueError(f"{where}.attributes[{attr!r}]: {err}") from None
    capacity: dict[str, dict] = {driver: {}}
    for cap, value in (raw.get("capacity") or {}).items():
        domain, short = _qualified(cap, driver)
        capacity.setdefault(domain, {})[short] = _quantity((value or {}).get("value", 0))
    consumes = tuple((str(c.get("counterSet")), {k: _quantity((v or {}).get("value", 0))
                                                for k, v in (c.get("counters") or {}).items()})
                     for c in raw.get("consumesCounters") or [])
    return Device(driver, pool, name, attributes, capacity, consumes)


@dataclass
class ClassInfo:
    name: str
    expressions: tuple[str, ...]
    extended_resource: str | None
    programs: list = field(default_factory=list)
    error: str | None = None


def _class_info(obj: Mapping) -> ClassInfo:
    name = str((obj.get("metadata") or {}).get("name") or "")
    spec = obj.get("spec") or {}
    expressions = tuple(str(((s or {}).get("cel") or {}).get("expression") or "true")
                        for s in spec.get("selectors") or [])
    info = ClassInfo(name, expressions, spec.get("extendedResourceName") or None)
    for i, expression in enumerate(expressions):
        try:
            info.programs.append(cel.compile(expression))
        except (ValueError, RuntimeError) as err:
            info.error = f"spec.selectors[{i}].cel.expression does not compile: {' '.join(str(err).split())}"
            break
    return info


def _cel_context(device: Device):
    context = cel.Context()
    for name, function in CEL_FUNCTIONS.items():
        context.add_function(name, function)
    context.add_variable("device", device.cel_value())
    return context


def selectors_match(programs: Sequence, device: Device) -> bool:
    """Whether every compiled selector is true for the device; an evaluation error raises ValueError."""
    if not programs:
        return True
    context = _cel_context(device)
    for program in programs:
        try:
            result = program.execute(context)
        except Exception as err:      # noqa: BLE001 - the library raises KeyError, TypeError, RuntimeError...
            raise ValueError(f"{type(err).__name__}: {err}") from None
        if result is not True:
            if not isinstance(result, bool):
                raise ValueError(f"the expression returned {result!r:.40}, not a bool")
            return False
    return True


# --- slices and pools ------------------------------------------------------------------------------

@dataclass
class Pool:
    devices: list[Device] = field(default_factory=list)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)     # counter set -> counter -> amount
    nodes: frozenset[str] = frozenset()          # the nodes its device slices select
    all_nodes: bool = False                      # a slice of it has allNodes


def _term_matches(node: NodeInfo, term: Mapping) -> bool:
    fields = {"metadata.name": node.name}
    return bool(term.get("matchExpressions") or term.get("matchFields")) and \
        all(_expression_matches(node.labels, e) for e in term.get("matchExpressions") or []) and \
        all(_expression_matches(fields, e) for e in term.get("matchFields") or [])


def _slice_nodes(spec: Mapping, nodes: Sequence[NodeInfo]) -> frozenset[str] | None:
    if spec.get("nodeName"):
        return frozenset([spec["nodeName"]])
    if spec.get("allNodes"):
        return None
    terms = (spec.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    if terms:
        return frozenset(n.name for n in nodes if any(_term_matches(n, t) for t in terms))
    return frozenset()            # perNodeAllocation / counters-only slice: places no device by itself


def build_pools(slices: Iterable[Mapping], nodes: Sequence[NodeInfo]) -> tuple[dict, list[str]]:
    """(driver, pool) -> Pool of the newest generation; and the problems of slices that could not be read."""
    newest: dict[tuple[str, str], int] = {}
    readable = []
    problems = []
    for obj in slices:
        name = (obj.get("metadata") or {}).get("name")
        spec = obj.get("spec") or {}
        pool = spec.get("pool") or {}
        key = (str(spec.get("driver") or ""), str(pool.get("name") or ""))
        try:
            generation = int(pool.get("generation") or 0)
        except (TypeError, ValueError):
            problems.append(f"ResourceSlice {name!r}: spec.pool.generation={pool.get('generation')!r} is not an integer")
            continue
        readable.append((obj, spec, key, generation))
        newest[key] = max(newest.get(key, generation), generation)
    pools: dict[tuple[str, str], Pool] = {}
    for obj, spec, key, generation in readable:
        if generation != newest[key]:
            continue
        name = (obj.get("metadata") or {}).get("name")
        pool = pools.setdefault(key, Pool())
        for counter_set in spec.get("sharedCounters") or []:
            pool.counters[str(counter_set.get("name"))] = {
                k: _quantity((v or {}).get("value", 0)) for k, v in (counter_set.get("counters") or {}).items()}
        placed = _slice_nodes(spec, nodes)
        if spec.get("devices"):
            if placed is None:
                pool.all_nodes = True
            else:
                pool.nodes |= placed
        for i, raw in enumerate(spec.get("devices") or []):
            try:
                pool.devices.append(_device(raw, key[0], key[1], f"ResourceSlice {name!r}: spec.devices[{i}]"))
            except ValueError as err:
                problems.append(str(err))
    return pools, problems


def allocated_devices(claims: Iterable[Mapping]) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) -> the claim (namespace/name) it is allocated to."""
    used = {}
    for claim in claims:
        metadata = claim.get("metadata") or {}
        owner = f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            used[(str(result.get("driver")), str(result.get("pool")), str(result.get("device")))] = owner
    return used


def claim_consumers(claim: Mapping) -> set[str]:
    """The pods (namespace/name) an allocated claim is reserved for (`status.reservedFor`, resource pods):
    kube-scheduler writes them with the allocation, before it binds the pod. Empty while unallocated."""
    status = claim.get("status") or {}
    if not ((status.get("allocation") or {}).get("devices") or {}).get("results"):
        return set()
    namespace = (claim.get("metadata") or {}).get("namespace") or "default"
    return {f"{namespace}/{c.get('name')}" for c in status.get("reservedFor") or []
            if (c or {}).get("resource") == "pods" and not c.get("apiGroup") and c.get("name")}


WAITS_FOR = "waits for "      # a refusal that an object yet to be created lifts: not "can never fit"


def _namespaced(obj: Mapping) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"


def _fits(consumes, available: Mapping[str, dict[str, int]]) -> bool:
    return all(available.get(s, {}).get(c, 0) >= amount for s, counters in consumes for c, amount in counters.items())


def _take(consumes, available: dict[str, dict[str, int]]) -> None:
    for counter_set, counters in consumes:
        for counter, amount in counters.items():
            available.setdefault(counter_set, {})[counter] = available.get(counter_set, {}).get(counter, 0) - amount


def free_count(devices: Sequence[Device], pool: Pool, taken: set, busy: Iterable[Device] = ()) -> int:
    """How many of `devices` (one class's, in name order) can be allocated together: not in `taken`, and
    within the counters left after the `busy` devices of the pool consumed theirs (greedy)."""
    available = {s: dict(c) for s, c in pool.counters.items()}
    for device in busy:
        _take(device.consumes, available)
    count = 0
    for device in devices:
        if device.key in taken:
            continue
        if device.consumes and not _fits(device.consumes, available):
            continue
        _take(device.consumes, available)
        count += 1
    return count


class DeviceModel:
    """Per node and DeviceClass: how many matching devices exist and how many are free. CEL results are
    kept per (class, device) across claim events; a class or slice change builds a new model."""

    def __init__(self, classes: Iterable[Mapping] = (), slices: Iterable[Mapping] = (),
                 claims: Iterable[Mapping] = (), nodes: Sequence[NodeInfo] = (), templates: Iterable[Mapping] = ()):
        self.templates = {_namespaced(t): t for t in templates}
        self.classes = {c.name: c for c in map(_class_info, classes) if c.name}
        self.pools, self.problems = build_pools(slices, nodes)
        self.node_names = [n.name for n in nodes]
        self.errors: dict[str, str] = {name: c.error for name, c in self.classes.items() if c.error}
        # (pool key, class) -> matching devices in name order
        self.matching: dict[tuple[tuple[str, str], str], list[Device]] = {}
        for name, info in self.classes.items():
            if info.error:
                continue
            try:
                for key, pool in self.pools.items():
                    found = [d for d in sorted(pool.devices, key=lambda d: d.name) if selectors_match(info.programs, d)]
                    if found:
                        self.matching[(key, name)] = found
            except ValueError as err:
                self.errors[name] = f"spec.selectors: CEL evaluation failed: {err}"
                self.matching = {k: v for k, v in self.matching.items() if k[1] != name}
        self.claims = {_namespaced(c): c for c in claims}
        self.allocated: dict[tuple[str, str, str], str] = allocated_devices(self.claims.values())
        self._largest: dict[str, int] | None = None

    @property
    def empty(self) -> bool:
        return not self.matching

    def pools_of(self, node: str):
        for key, pool in self.pools.items():
            if pool.all_nodes or node in pool.nodes:
                yield key, pool

    def counts(self, node: str, allocated: Mapping | None = None) -> dict[str, int]:
        """Class -> devices on the node that could be allocated (with `allocated`: those still free)."""
        taken = set(allocated or ())
        totals: dict[str, int] = {}
        for key, pool in self.pools_of(node):
            busy = [d for d in pool.devices if d.key in taken] if taken else []
            for name in self.classes:
                devices = self.matching.get((key, name))
                if devices:
                    totals[name] = totals.get(name, 0) + free_count(devices, pool, taken, busy)
        return totals

    def freed_counts(self, node: str, devices: Collection[tuple[str, str, str]]) -> dict[str, int]:
        """Class -> how many more devices of the node could be allocated once the allocated `devices`
        (driver, pool, device) are free: on the node's pools holding them only (so it costs their devices,
        not the cluster's), counters included (one freed MIG instance may free its whole GPU)."""
        gone = set(devices)
        gained: dict[str, int] = {}
        for key in {d[:2] for d in gone}:
            pool = self.pools.get(key)
            if pool is None or not (pool.all_nodes or node in pool.nodes):
                continue
            if not pool.counters:          # each freed device is one more of every class it matches
                for name in self.classes:
                    more = sum(d.key in gone for d in self.matching.get((key, name), ()))
                    if more:
                        gained[name] = gained.get(name, 0) + more
                continue
            before = [d for d in pool.devices if d.key in self.allocated]
            after = [d for d in before if d.key not in gone]
            taken, left = {d.key for d in before}, {d.key for d in after}
            for name in self.classes:
                matching = self.matching.get((key, name))
                if matching:
                    more = free_count(matching, pool, left, after) - free_count(matching, pool, taken, before)
                    if more:
                        gained[name] = gained.get(name, 0) + more
        return gained

    def shares_counters(self, devices: Iterable[tuple[str, str, str]]) -> bool:
        """Whether any of these devices is in a pool with shared counters."""
        return any(pool is not None and pool.counters for pool in (self.pools.get(d[:2]) for d in devices))

    def largest_count(self, device_class: str) -> int:
        """The most devices of a class any one node has (what `allocationMode: All` asks, approximated)."""
        if self._largest is None:
            self._largest = {}
            for node in self.node_names:
                for name, count in self.counts(node).items():
                    self._largest[name] = max(self._largest.get(name, 0), count)
        return self._largest.get(device_class, 0)

    def _class_problem(self, device_class: str, count: int) -> str | None:
        if device_class not in self.classes:
            return "no such DeviceClass"
        if device_class in self.errors:
            return f"the class is skipped ({self.errors[device_class]})"
        largest = self.largest_count(device_class)
        if largest < count:
            return f"no node has {count} matching devices (at most {largest})"
        return None

    def extended_resources(self) -> dict[str, str]:
        """Class -> the extended resource it serves (DRAExtendedResource), for the classes that count."""
        return {name: c.extended_resource for name, c in self.classes.items()
                if c.extended_resource and name not in self.errors}

    def apply_claim(self, before: Mapping | None, after: Mapping | None) -> set[str]:
        """A claim changed (None: absent before / deleted): its devices follow; the nodes it touched."""
        touched = set()
        for claim in (before, after):
            if claim is not None:
                touched |= self.claim_nodes(claim)
        if before is not None:
            for device, owner in allocated_devices([before]).items():
                if self.allocated.get(device) == owner:
                    del self.allocated[device]
        if before is not None:
            self.claims.pop(_namespaced(before), None)
        if after is not None:
            self.claims[_namespaced(after)] = after
            self.allocated.update(allocated_devices([after]))
        return touched

    def claim_allows(self, spec: Mapping, namespace: str, node: NodeInfo) -> bool:
        """Whether every allocated ResourceClaim the pod names (`resourceClaimName`) may be used on the node:
        its `status.allocation.nodeSelector` selects it (no selector: any node). An unallocated or missing
        claim restricts nothing here."""
        for entry in spec.get("resourceClaims") or []:
            name = (entry or {}).get("resourceClaimName")
            claim = self.claims.get(f"{namespace}/{name}") if name else None
            allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
            terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
            if terms and not any(_term_matches(node, t) for t in terms):
                return False
        return True

    def names_claims(self, spec: Mapping) -> bool:
        return any((entry or {}).get("resourceClaimName") for entry in spec.get("resourceClaims") or [])

    def claim_nodes(self, claim: Mapping) -> set[str]:
        """The nodes whose counts an allocated claim changes."""
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        pools = {(str(r.get("driver")), str(r.get("pool"))) for r in results}
        nodes: set[str] = set()
        for key in pools:
            pool = self.pools.get(key)
            if pool is not None:
                nodes |= set(self.node_names) if pool.all_nodes else set(pool.nodes)
        return nodes

    def failure(self, device_class: str) -> str | None:
        """How a skipped class failed: "cel-compile" (a selector does not compile) or "cel-evaluation" (it
        compiled, and failed on a device); None for a class that counts."""
        if device_class not in self.errors:
            return None
        info = self.classes.get(device_class)
        return "cel-compile" if info is not None and info.error else "cel-evaluation"
