"""Devices published through Dynamic Resource Allocation (resource.k8s.io), counted per node and DeviceClass.

Per node and class: the devices of the node's ResourceSlices (`spec.nodeName`; `nodeSelector` / `allNodes`
slices on every node they select; only the newest `spec.pool.generation` of a pool) that match the class's
CEL selectors. Allocated claims (`status.allocation.devices.results`) make their devices used, once per claim.
Partitionable devices (`sharedCounters` / `consumesCounters`, as MIG): a device is free only while the
counters of its pool allow it; the free devices of a class are counted by taking them greedily in name order.

The counts become columns of the node x resource matrices (topology/cluster.py): one per class (named after
the class), and, on a node whose allocatable lacks it, the class's `extendedResourceName`.

Kept in place: a slice event assembles its pool again, a class event matches that class again, a claim event
changes its devices (DeviceModel.apply_slice / apply_class / apply_claim return the nodes touched, whose
rows the Cluster rewrites). CEL answers (per class expressions and slice version, a bit per device) and
parsed slices live in a DeviceCache that each new model takes over from the one before.
"""
from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import cel

from .nodes import NodeInfo, _expression_matches
from .quantity import QuantityError, parse_quantity

# --- CEL: the DRA environment (device.driver, device.attributes, device.capacity, quantity(), semver()) ----

@functools.lru_cache(maxsize=4096)
def _quantity(text):
    """Milli-units of a quantity (memoized: a driver's slices repeat the same few amounts)."""
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


def _attributes(raw: Mapping, driver: str, where: str = "device") -> dict[str, dict]:
    """domain -> name -> value, as CEL sees `device.attributes` (the driver's domain always present)."""
    attributes: dict[str, dict] = {driver: {}}
    for attr, value in (raw.get("attributes") or {}).items():
        domain, short = _qualified(attr, driver)
        try:
            attributes.setdefault(domain, {})[short] = _attribute_value(value or {})
        except ValueError as err:
            raise ValueError(f"{where}.attributes[{attr!r}]: {err}") from None
    return attributes


def _capacity(raw: Mapping, driver: str) -> dict[str, dict]:
    """domain -> name -> milli-units, as CEL sees `device.capacity`."""
    capacity: dict[str, dict] = {driver: {}}
    for cap, value in (raw.get("capacity") or {}).items():
        domain, short = _qualified(cap, driver)
        capacity.setdefault(domain, {})[short] = _quantity((value or {}).get("value", 0))
    return capacity


class Device:
    """One published device. A model keeps per device only what counting needs: its name, its pool's key
    (shared by the devices of a slice) and the counters it consumes (shared between devices that consume
    the same). Its attributes and capacity are read from the
    slice's own object when asked (`raw`, not copied), so a model holds no per-device maps."""

    __slots__ = ("pool_key", "name", "flat", "raw")

    def __init__(self, driver: str, pool: str, name: str, raw: Mapping,
                 consumes: tuple[tuple[str, Mapping[str, int]], ...] = (),
                 flat: tuple[tuple[tuple[str, str], int], ...] | None = None, pool_key: tuple[str, str] | None = None):
        self.pool_key = pool_key or (driver, pool)        # shared by the devices of a slice
        self.name, self.raw = name, raw
        # ((counter set, counter), amount) for each counter consumed: what free_count reads
        self.flat = flat if flat is not None else tuple(
            ((s, c), amount) for s, counters in consumes for c, amount in counters.items())

    @property
    def driver(self) -> str:
        return self.pool_key[0]

    @property
    def pool(self) -> str:
        return self.pool_key[1]

    @property
    def consumes(self) -> tuple[tuple[str, dict[str, int]], ...]:
        """(counter set, counter -> amount), as the slice says."""
        sets: dict[str, dict[str, int]] = {}
        for (counter_set, counter), amount in self.flat:
            sets.setdefault(counter_set, {})[counter] = amount
        return tuple(sets.items())

    @property
    def key(self) -> tuple[str, str, str]:
        return self.pool_key + (self.name,)

    @property
    def attributes(self) -> dict[str, dict]:
        return _attributes(self.raw, self.driver)

    @property
    def capacity(self) -> dict[str, dict]:
        return _capacity(self.raw, self.driver)

    def cel_value(self) -> dict:
        return {"driver": self.driver, "attributes": self.attributes, "capacity": self.capacity}

    def __repr__(self) -> str:
        return f"Device({self.driver}/{self.pool}/{self.name})"


def _device(raw: Mapping, driver: str, pool: str, where: str, shared: dict | None = None,
            pool_key: tuple[str, str] | None = None) -> Device:
    """A device of a slice, its attributes and capacity checked (an invalid one raises ValueError naming
    the field). `shared` interns equal names and counter maps between devices (DeviceCache.shared)."""
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.name is required (a non-empty string)")
    _attributes(raw, driver, where)
    _capacity(raw, driver)
    consumes = tuple((str(c.get("counterSet")), {k: _quantity((v or {}).get("value", 0))
                                                for k, v in (c.get("counters") or {}).items()})
                     for c in raw.get("consumesCounters") or [])
    flat = tuple(((s, c), amount) for s, counters in consumes for c, amount in counters.items())
    if shared is not None:
        name = shared.setdefault(name, name)
        flat = shared.setdefault(("counters", flat), flat)
    return Device(driver, pool, name, raw, flat=flat, pool_key=pool_key)


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


# --- what survives a new model: CEL answers per (class selectors, device content), parsed slices ----------

class DeviceCache:
    """Kept from one DeviceModel to the next (ServiceState hands the old model's to the new one), so that a
    rebuild (a node added, a relist) evaluates CEL only for slices or classes it has not seen, and parses
    only slices it has not seen. A slice is the same while its `metadata.resourceVersion` is (without one:
    while it is the same object); a class's answers are kept per its expressions, as one bit per device of
    each slice. A new version of a slice takes the answers of the devices its previous version published
    with the same content: only a changed device of a changed slice, or a changed class, is evaluated."""

    def __init__(self) -> None:
        # expressions -> parsed slice -> bit i set when its device i matches (or the evaluation's error)
        self.answers: dict[tuple[str, ...], dict[ParsedSlice, int | str]] = {}
        self.slices: dict[tuple, tuple[Mapping, ParsedSlice]] = {}       # slice version -> (object, parsed)
        self.named: dict[str, ParsedSlice] = {}                          # slice name -> its latest parsed
        self.previous: dict[ParsedSlice, ParsedSlice] = {}               # parsed -> the version it replaced
        self.shared: dict = {}              # equal device names and counter maps, interned
        self.evaluations = 0                # CEL evaluations made (a miss of the cache), one per device

    def matches(self, info: ClassInfo, parsed: ParsedSlice) -> int:
        """Bit i set when device i of the slice matches the class (cached); an evaluation error raises
        ValueError."""
        answers = self.answers.setdefault(info.expressions, {})
        answer = answers.get(parsed)
        if answer is None:
            # devices the slice's previous version published alike keep their answers: a device is
            # evaluated again only when it changed
            previous = self.previous.get(parsed)
            known = answers.get(previous) if previous is not None else None
            kept = {d.name: (d.raw, known >> i & 1) for i, d in enumerate(previous.devices)} \
                if isinstance(known, int) else {}
            answer = 0
            try:
                for i, device in enumerate(parsed.devices):
                    seen = kept.get(device.name)
                    if seen is not None and seen[0] == device.raw:
                        answer |= seen[1] << i
                        continue
                    self.evaluations += 1
                    if selectors_match(info.programs, device):
                        answer |= 1 << i
            except ValueError as err:
                answer = str(err)
            answers[parsed] = answer
        if isinstance(answer, str):
            raise ValueError(answer)
        return answer

    @staticmethod
    def version(obj: Mapping) -> tuple:
        metadata = obj.get("metadata") or {}
        if metadata.get("resourceVersion"):
            return metadata.get("name"), metadata.get("uid"), metadata["resourceVersion"]
        return (id(obj),)

    def parsed(self, obj: Mapping) -> ParsedSlice:
        key = self.version(obj)
        hit = self.slices.get(key)
        if hit is not None and (len(key) > 1 or hit[0] is obj):
            return hit[1]
        parsed = ParsedSlice.of(obj, self.shared)
        self.slices[key] = (obj, parsed)
        previous = self.named.get(parsed.name)
        if previous is not None:
            self.previous[parsed] = previous
        self.named[parsed.name] = parsed
        return parsed

    def forget(self, obj: Mapping) -> None:
        """A slice version replaced or deleted (its parsed form and answers go at the next full build)."""
        key = self.version(obj)
        hit = self.slices.get(key)
        if hit is not None and (len(key) > 1 or hit[0] is obj):
            del self.slices[key]

    def keep(self, slices: Iterable[Mapping], classes: Iterable[ClassInfo]) -> None:
        """Forget what no longer exists (after a full build): other slices and classes."""
        kept = {self.version(o) for o in slices}
        self.slices = {k: v for k, v in self.slices.items() if k in kept}
        live = {parsed for _, parsed in self.slices.values()}
        self.named = {p.name: p for p in live}
        self.previous.clear()
        expressions = {c.expressions for c in classes}
        self.answers = {e: {p: a for p, a in answers.items() if p in live}
                        for e, answers in self.answers.items() if e in expressions}


# --- slices and pools ------------------------------------------------------------------------------

NO_COUNTERS: Mapping[str, Mapping[str, int]] = MappingProxyType({})     # shared by every pool without counters


@dataclass(slots=True)
class Pool:
    devices: Sequence[Device] = ()               # in name order
    counters: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: NO_COUNTERS)  # set -> counter -> amount
    nodes: tuple[str, ...] = ()                  # the nodes its device slices select
    all_nodes: bool = False                      # a slice of it has allNodes
    generation: int = 0                          # the newest generation of its slices: the one counted


@dataclass(slots=True, eq=False)
class ParsedSlice:
    """A ResourceSlice as the model reads it (independent of the nodes; cached per object)."""
    name: str
    key: tuple[str, str]                         # (driver, pool)
    generation: int | None                       # None: unreadable (see problems)
    spec: Mapping
    devices: tuple[Device, ...]
    counters: dict[str, dict[str, int]]
    problems: tuple[str, ...]

    @classmethod
    def of(cls, obj: Mapping, shared: dict | None = None) -> "ParsedSlice":
        name = (obj.get("metadata") or {}).get("name")
        spec = obj.get("spec") or {}
        pool = spec.get("pool") or {}
        key = (str(spec.get("driver") or ""), str(pool.get("name") or ""))
        try:
            generation: int | None = int(pool.get("generation") or 0)
        except (TypeError, ValueError):
            return cls(str(name), key, None, spec, (), {}, (
                f"ResourceSlice {name!r}: spec.pool.generation={pool.get('generation')!r} is not an integer",))
        counters = {str(c.get("name")): {k: _quantity((v or {}).get("value", 0))
                                         for k, v in (c.get("counters") or {}).items()}
                    for c in spec.get("sharedCounters") or []} or NO_COUNTERS
        devices, problems = [], []
        for i, raw in enumerate(spec.get("devices") or []):
            try:
                devices.append(_device(raw, key[0], key[1], f"ResourceSlice {name!r}: spec.devices[{i}]", shared, key))
            except ValueError as err:
                problems.append(str(err))
        return cls(str(name), key, generation, spec, tuple(devices), counters, tuple(problems))


def _term_matches(node: NodeInfo, term: Mapping) -> bool:
    fields = {"metadata.name": node.name}
    return bool(term.get("matchExpressions") or term.get("matchFields")) and \
        all(_expression_matches(node.labels, e) for e in term.get("matchExpressions") or []) and \
        all(_expression_matches(fields, e) for e in term.get("matchFields") or [])


def _slice_nodes(spec: Mapping, nodes: Iterable[NodeInfo]) -> frozenset[str] | None:
    if spec.get("nodeName"):
        return frozenset([spec["nodeName"]])
    if spec.get("allNodes"):
        return None
    terms = (spec.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    if terms:
        return frozenset(n.name for n in nodes if any(_term_matches(n, t) for t in terms))
    return frozenset()            # perNodeAllocation / counters-only slice: places no device by itself


def assemble_pool(slices: Iterable[ParsedSlice], nodes: Iterable[NodeInfo]) -> Pool | None:
    """One pool from its readable slices: those of its newest generation (None: it has none); its devices
    in name order."""
    readable = [s for s in slices if s.generation is not None]
    if not readable:
        return None
    newest = max(s.generation for s in readable)
    pool = Pool(generation=newest)
    placed: set[str] = set()
    counters: dict[str, dict[str, int]] = {}
    parts = []
    for parsed in readable:
        if parsed.generation != newest:
            continue
        counters.update(parsed.counters)
        if parsed.spec.get("devices"):
            where = _slice_nodes(parsed.spec, nodes)
            if where is None:
                pool.all_nodes = True
            else:
                placed |= where
        if parsed.devices:
            parts.append(parsed.devices)
    pool.counters = counters or NO_COUNTERS
    if len(parts) == 1 and all(a.name <= b.name for a, b in zip(parts[0], parts[0][1:])):
        pool.devices = parts[0]                 # the slice's own tuple, already in name order
    else:
        pool.devices = sorted((d for part in parts for d in part), key=lambda d: d.name)
    pool.nodes = tuple(sorted(placed))
    return pool


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


def free_count(devices: Sequence[Device], pool: Pool, taken: Collection, busy: Iterable[Device] = ()) -> int:
    """How many of `devices` (one class's, in name order) can be allocated together: not in `taken`, and
    within the counters left after the `busy` devices of the pool consumed theirs (greedy)."""
    if not pool.counters:           # nothing shared: each device not taken counts (but one consuming what is not there)
        return sum(1 for d in devices if (not taken or d.key not in taken)
                   and all(amount <= 0 for _, amount in d.flat))
    available = {(s, c): amount for s, counters in pool.counters.items() for c, amount in counters.items()}
    for device in busy:
        for counter, amount in device.flat:
            available[counter] = available.get(counter, 0) - amount
    count = 0
    for device in devices:
        if taken and device.key in taken:
            continue
        flat = device.flat
        if flat and not all(available.get(counter, 0) >= amount for counter, amount in flat):
            continue
        for counter, amount in flat:
            available[counter] = available.get(counter, 0) - amount
        count += 1
    return count


class DeviceModel:
    """Per node and DeviceClass: how many matching devices exist and how many are free. Kept in place on
    events: a ResourceSlice's (`apply_slice`: its pool assembled again), a DeviceClass's (`apply_class`:
    that class matched again) and a ResourceClaim's (`apply_claim`); each returns the nodes whose counts it
    may have changed. CEL answers per (class, device content) and parsed slices live in `cache`, which a
    new model takes over from the old one (ServiceState), so a rebuild evaluates only what it has not seen.
    Pools are indexed by node."""

    def __init__(self, classes: Iterable[Mapping] = (), slices: Iterable[Mapping] = (),
                 claims: Iterable[Mapping] = (), nodes: Sequence[NodeInfo] = (), templates: Iterable[Mapping] = (),
                 cache: DeviceCache | None = None):
        self.cache = cache if cache is not None else DeviceCache()
        self.templates = {_namespaced(t): t for t in templates}
        self.classes = {c.name: c for c in map(_class_info, classes) if c.name}
        self.nodes = {n.name: n for n in nodes}
        self.node_names = list(self.nodes)
        slice_objects = list(slices)
        self.slices: dict[str, ParsedSlice] = {}                                  # by slice name
        self._pool_slices: dict[tuple[str, str], tuple[ParsedSlice, ...]] = {}    # pool -> its slices
        for obj in slice_objects:
            parsed = self.cache.parsed(obj)
            self.slices[parsed.name] = parsed
            self._pool_slices[parsed.key] = self._pool_slices.get(parsed.key, ()) + (parsed,)
        self.pools: dict[tuple[str, str], Pool] = {}
        self._node_pools: dict[str, tuple[tuple[str, str], ...]] = {}    # node -> keys of the pools placed on it
        self._everywhere: list[tuple[str, str]] = []                      # pools of allNodes slices
        for key in self._pool_slices:
            self._place_pool(key)
        self.errors: dict[str, str] = {name: c.error for name, c in self.classes.items() if c.error}
        # (pool key, class) -> matching devices in name order
        self.matching: dict[tuple[tuple[str, str], str], list[Device]] = {}
        for info in self.classes.values():
            self._match_class(info, list(self.pools))
        self.claims = {_namespaced(c): c for c in claims}
        self.allocated: dict[tuple[str, str, str], str] = allocated_devices(self.claims.values())
        self._largest: dict[str, int] | None = None
        self.cache.keep(slice_objects, self.classes.values())

    @property
    def empty(self) -> bool:
        return not self.matching

    @property
    def problems(self) -> list[str]:
        """Why slices (of a pool's newest generation) or their devices could not be read."""
        found = []
        for parsed in self._pool_slices.values():
            generations = [s.generation for s in parsed if s.generation is not None]
            newest = max(generations) if generations else None
            found += [p for s in parsed if s.generation in (None, newest) for p in s.problems]
        return found

    # --- pools, placed on nodes -----------------------------------------------------------------------
    def _pool_nodes(self, pool: Pool | None) -> set[str]:
        if pool is None:
            return set()
        return set(self.node_names) if pool.all_nodes else set(pool.nodes)

    def _place_pool(self, key: tuple[str, str]) -> set[str]:
        """Assemble the pool from its slices again and index it by node; the nodes it was or is on."""
        old = self.pools.pop(key, None)
        touched = self._pool_nodes(old)
        if old is not None:
            if old.all_nodes:
                self._everywhere.remove(key)
            for node in old.nodes:
                keys = tuple(k for k in self._node_pools.get(node, ()) if k != key)
                if keys:
                    self._node_pools[node] = keys
                else:
                    self._node_pools.pop(node, None)
        pool = assemble_pool(self._pool_slices.get(key, ()), self.nodes.values())
        if pool is not None:
            self.pools[key] = pool
            if pool.all_nodes:
                self._everywhere.append(key)
            for node in pool.nodes:
                self._node_pools[node] = self._node_pools.get(node, ()) + (key,)
        return touched | self._pool_nodes(pool)

    def _match_class(self, info: ClassInfo, keys: Iterable[tuple[str, str]]) -> None:
        """The class's matching devices on these pools (CEL answers from the cache, per slice); a failing
        evaluation skips the class (errors)."""
        name = info.name
        if info.error or name in self.errors:
            return
        try:
            for key in keys:
                pool = self.pools.get(key)
                found: list[Device] = []
                for parsed in (self._pool_slices.get(key, ()) if pool is not None else ()):
                    if parsed.generation == pool.generation and parsed.devices:
                        bits = self.cache.matches(info, parsed)
                        found += [d for i, d in enumerate(parsed.devices) if bits >> i & 1]
                if found:
                    found.sort(key=lambda d: d.name)
                    self.matching[(key, name)] = pool.devices if len(found) == len(pool.devices) else found
                else:
                    self.matching.pop((key, name), None)
        except ValueError as err:
            self.errors[name] = f"spec.selectors: CEL evaluation failed: {err}"
            self.matching = {k: v for k, v in self.matching.items() if k[1] != name}

    def _class_nodes(self, name: str) -> set[str]:
        nodes: set[str] = set()
        for key, device_class in self.matching:
            if device_class == name:
                nodes |= self._pool_nodes(self.pools.get(key))
        return nodes

    def _changed(self, nodes: Iterable[str]) -> None:
        self._largest = None            # recounted once, when next asked

    # --- events ---------------------------------------------------------------------------------------
    def apply_slice(self, before: Mapping | None, after: Mapping | None) -> set[str] | None:
        """A ResourceSlice changed (None: absent before / deleted): its pool (and the pool it left) is
        assembled again and matched against every class, CEL answers coming from the cache for devices seen
        before. The nodes whose counts may have changed; None when a class now fails to evaluate or counts
        again (the set of counted classes changed: a new model has other columns)."""
        keys: set[tuple[str, str]] = set()
        for obj in (before, after):
            if obj is None:
                continue
            name = str((obj.get("metadata") or {}).get("name"))
            old = self.slices.pop(name, None)
            if old is not None:
                keys.add(old.key)
                siblings = tuple(s for s in self._pool_slices.get(old.key, ()) if s is not old)
                if siblings:
                    self._pool_slices[old.key] = siblings
                else:
                    self._pool_slices.pop(old.key, None)
        if before is not None:
            self.cache.forget(before)
        if after is not None:
            parsed = self.cache.parsed(after)
            self.slices[parsed.name] = parsed
            self._pool_slices[parsed.key] = self._pool_slices.get(parsed.key, ()) + (parsed,)
            keys.add(parsed.key)
        errors = dict(self.errors)
        touched: set[str] = set()
        for key in keys:
            touched |= self._place_pool(key)
        for info in self.classes.values():
            self._match_class(info, keys)
        self.cache.previous.clear()
        self._changed(touched)
        return None if self.errors != errors else touched

    def apply_class(self, before: Mapping | None, after: Mapping | None) -> set[str] | None:
        """A DeviceClass changed: only that class is matched again (its CEL answers are cached per
        expressions, so changing a selector back costs nothing). The nodes whose counts may have changed;
        None when the class comes, goes, starts or stops being skipped, or serves another extended resource
        (a new model has other columns)."""
        name = str(((after or before) or {}).get("metadata", {}).get("name") or "")
        old = self.classes.get(name)
        new = _class_info(after) if after is not None else None
        if old is None or new is None or new.name != name or old.extended_resource != new.extended_resource:
            return None
        skipped = name in self.errors
        touched = self._class_nodes(name)
        self.classes[name] = new
        self.errors.pop(name, None)
        self.matching = {k: v for k, v in self.matching.items() if k[1] != name}
        if new.error:
            self.errors[name] = new.error
        else:
            self._match_class(new, list(self.pools))
        if (name in self.errors) != skipped:
            return None
        touched |= self._class_nodes(name)
        self._changed(touched)
        return touched

    def pools_of(self, node: str):
        for key in self._node_pools.get(node, ()):
            yield key, self.pools[key]
        for key in self._everywhere:
            yield key, self.pools[key]

    def counts(self, node: str, allocated: Mapping | None = None) -> dict[str, int]:
        """Class -> devices on the node that could be allocated (with `allocated`: those still free). Reads
        only the node's own pools; the Cluster keeps the answers in its matrices (asked again only for the
        nodes an event touches)."""
        return self._count(node, allocated or {})

    def _count(self, node: str, taken: Mapping) -> dict[str, int]:
        totals: dict[str, int] = {}
        for key, pool in self.pools_of(node):
            busy = [d for d in pool.devices if d.key in taken] if taken else []
            for name in self.classes:
                devices = self.matching.get((key, name))
                if devices:
                    totals[name] = totals.get(name, 0) + free_count(devices, pool, taken, busy)
        return totals

    def allocated_nodes(self) -> set[str]:
        """The nodes of the pools that hold allocated devices."""
        nodes: set[str] = set()
        for key in {device[:2] for device in self.allocated}:
            nodes |= self._pool_nodes(self.pools.get(key))
        return nodes

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
