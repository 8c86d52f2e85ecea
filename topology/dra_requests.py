"""What a pod's ResourceClaims ask of DRA devices, as columns of the node x resource matrices.

A request asks `count` devices of its DeviceClass: that is the class's column (topology/dra.py). On top:
- a request with its own `selectors` (v1 `exactly.selectors` / `firstAvailable[i].selectors`, v1beta1's
  request-level `selectors`) also asks as many devices of a *selector column*, one per distinct (class,
  selectors): per node, the free devices of the class that match the request's CEL selectors too;
- a claim `constraints[]` entry with `matchAttribute` asks one of a *group column*, one per distinct
  (requests, attribute): per node, how many such claims its free devices can serve, each from devices that
  share one value of the attribute (sum over the values of the fewest claims any request's devices allow).
A `firstAvailable` request counts as the first alternative some node could serve (resolve_request); the
selector columns of all its alternatives are registered, its group columns use its first alternative.
The columns are found once per model from the ResourceClaimTemplates and the unallocated ResourceClaims
and counted per node with the class counts (at build and on claim events), never per filter call.

`Links` is the one rule that a class column and the extended resource it serves on a node
(DRAExtendedResource) are the same devices: using or reserving either lowers both (Cluster reservations and
the planner's own placements apply it).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import cel
import numpy as np

from .dra import WAITS_FOR, Device, DeviceModel, _qualified, free_count, selectors_match


# --- requests ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ask:
    """One request, resolved: `count` devices of `device_class` that also match `selectors`."""
    request: str                      # the request's name
    device_class: str
    selectors: tuple[str, ...]
    count: int
    all: bool = False                 # allocationMode: All


def _selectors(raw: Mapping) -> tuple[str, ...]:
    return tuple(str(((s or {}).get("cel") or {}).get("expression") or "true") for s in raw.get("selectors") or [])


def _resolve(name: str, exactly: Mapping) -> Ask | None:
    device_class = (exactly or {}).get("deviceClassName")
    if not device_class:
        return None
    every = exactly.get("allocationMode") == "All"
    return Ask(name, str(device_class), _selectors(exactly), 0 if every else int(exactly.get("count") or 1), every)


def alternatives(request: Mapping) -> list[Ask]:
    """Every way the request may be allocated, in order: its `firstAvailable` alternatives, else `exactly`
    (v1, v1beta2) or the request's own fields (v1beta1). Those naming no class are left out."""
    name = str(request.get("name") or "")
    if request.get("exactly") is None and request.get("firstAvailable"):
        found = (_resolve(name, alternative or {}) for alternative in request["firstAvailable"])
    else:
        found = [_resolve(name, request.get("exactly") if request.get("exactly") is not None else request)]
    return [ask for ask in found if ask is not None]


def _servable(ask: Ask, largest) -> bool:
    """Whether some node could serve the ask: the most one node has of its class (a skipped or missing
    class: none), and of its selector column, is at least its count (`allocationMode: All`: one)."""
    need = max(ask.count, 1)
    return largest(ask.device_class) >= need and \
        (not ask.selectors or largest(selector_column(ask.device_class, ask.selectors)) >= need)


def resolve_request(request: Mapping, largest=None) -> Ask | None:
    """The request as counted. With `firstAvailable`, kube-scheduler allocates the first alternative that
    fits: given `largest(column)` (the most one node has), the first alternative some node could serve,
    else (and without `largest`) the first one, so refusals name it. None when it names no class."""
    found = alternatives(request)
    if largest is not None:
        for ask in found:
            if _servable(ask, largest):
                return ask
    return found[0] if found else None


def claim_asks(claim_spec: Mapping, largest=None) -> list[Ask]:
    """The resolved requests of a claim spec (`spec.devices.requests`); `largest` as for resolve_request."""
    requests = ((claim_spec or {}).get("devices") or {}).get("requests") or []
    return [ask for ask in (resolve_request(r or {}, largest) for r in requests) if ask is not None]


def _every_ask(claim_spec: Mapping) -> list[Ask]:
    """Every alternative of every request of a claim spec (each may be the one counted)."""
    requests = ((claim_spec or {}).get("devices") or {}).get("requests") or []
    return [ask for r in requests for ask in alternatives(r or {})]


def selector_column(device_class: str, selectors: Sequence[str]) -> str:
    return f"{device_class}[{' && '.join(selectors)}]"


@dataclass(frozen=True)
class Group:
    """A claim constraint: the requests (class, selectors, count) whose devices share `attribute`."""
    parts: tuple[tuple[str, tuple[str, ...], int], ...]
    attribute: str

    @property
    def name(self) -> str:
        """`gpu.nvidia.com[4 per claim, same resource.kubernetes.io/pcieRoot]`; with several requests
        `gpu.nvidia.com[2 gpu.nvidia.com + 1 nic per claim, same ...]`: named after its first class, so that
        class sorts first where a request's main resource is shown."""
        if len(self.parts) == 1 and not self.parts[0][1]:
            parts = str(self.parts[0][2])
        else:
            parts = " + ".join(f"{count} {selector_column(c, s) if s else c}" for c, s, count in self.parts)
        return f"{self.parts[0][0]}[{parts} per claim, same {self.attribute}]"


def claim_groups(claim_spec: Mapping, asks: Sequence[Ask] | None = None) -> list[Group]:
    """The claim's `constraints[]` with `matchAttribute` (no `requests`: all of them) as groups. Requests
    of one class and selectors are merged (they take devices of one set)."""
    asks = claim_asks(claim_spec) if asks is None else asks
    by_name = {ask.request: ask for ask in asks}
    groups = []
    for constraint in ((claim_spec or {}).get("devices") or {}).get("constraints") or []:
        attribute = (constraint or {}).get("matchAttribute")
        if not attribute:
            continue
        names = constraint.get("requests") or list(by_name)
        merged: dict[tuple[str, tuple[str, ...]], int] = {}
        for name in names:
            ask = by_name.get(str(name).split("/", 1)[0])        # a firstAvailable subrequest: its request
            if ask is not None:
                key = (ask.device_class, ask.selectors)
                merged[key] = merged.get(key, 0) + max(ask.count, 1)
        if merged:
            groups.append(Group(tuple((c, s, n) for (c, s), n in sorted(merged.items())), str(attribute)))
    return groups


# --- the columns -----------------------------------------------------------------------------------------

def _attribute(device: Device, name: str):
    domain, short = _qualified(name, device.driver)
    return (device.attributes.get(domain) or {}).get(short)


class RequestColumns:
    """The selector and group columns of a DeviceModel's templates and unallocated claims, counted per node."""

    def __init__(self, model: DeviceModel):
        self.model = model
        self.selectors: dict[str, tuple[str, tuple[str, ...]]] = {}     # column -> (class, selectors)
        self.groups: dict[str, Group] = {}
        self.errors: dict[str, str] = {}                                  # column -> why it counts nothing
        self._programs: dict[tuple[str, ...], list] = {}
        self._devices: dict[tuple, list[Device]] = {}                     # (pool key, class, selectors) -> devices
        self._failed: dict[tuple[str, ...], str] = {}                     # selectors -> their evaluation error
        self._values: dict[tuple, dict] = {}                              # (pool, class, selectors, attribute) -> value -> devices
        self.largest: dict[str, int] = {}                                 # column -> most on one node (total)
        self._totals: dict[str, dict[str, int]] = {}                      # node -> its counts with nothing allocated
        self._by_node: dict[str, list] | None = None                      # node -> its pools (all-nodes pools apart)
        self._everywhere: list = []
        for spec in self.claim_specs():
            self.register(spec)

    def _pools_of(self, node: str) -> list:
        """The (key, pool) pairs placing devices on the node, from an index built once per model."""
        if self._by_node is None:
            self._by_node = {}
            for key, pool in self.model.pools.items():
                if pool.all_nodes:
                    self._everywhere.append((key, pool))
                else:
                    for name in pool.nodes:
                        self._by_node.setdefault(name, []).append((key, pool))
        return self._by_node.get(node, []) + self._everywhere

    def claim_specs(self) -> Iterable[Mapping]:
        for template in self.model.templates.values():
            yield ((template.get("spec") or {}).get("spec")) or {}
        for claim in self.model.claims.values():
            if not ((claim.get("status") or {}).get("allocation")):
                yield claim.get("spec") or {}

    def register(self, claim_spec: Mapping) -> bool:
        """Add the columns a claim spec asks; True when it added one (a new column needs a new model)."""
        added = False
        for ask in _every_ask(claim_spec):
            if ask.selectors:
                name = selector_column(ask.device_class, ask.selectors)
                if name not in self.selectors:
                    self.selectors[name] = (ask.device_class, ask.selectors)
                    self._compile(name, ask.selectors)
                    added = True
        for group in claim_groups(claim_spec):
            if group.name not in self.groups:
                self.groups[group.name] = group
                for _, selectors, _ in group.parts:
                    self._compile(group.name, selectors)
                added = True
        return added

    def knows(self, claim_spec: Mapping) -> bool:
        """Whether every column the claim spec asks exists already."""
        return all(selector_column(a.device_class, a.selectors) in self.selectors
                   for a in _every_ask(claim_spec) if a.selectors) \
            and all(g.name in self.groups for g in claim_groups(claim_spec))

    def _compile(self, column: str, selectors: tuple[str, ...]) -> None:
        if selectors in self._programs or not selectors:
            self._programs.setdefault(selectors, [])
            return
        programs = []
        for i, expression in enumerate(selectors):
            try:
                programs.append(cel.compile(expression))
            except (ValueError, RuntimeError) as err:
                self.errors[column] = f"selectors[{i}].cel.expression does not compile: {' '.join(str(err).split())}"
                return
        self._programs[selectors] = programs

    def _matching(self, key, device_class: str, selectors: tuple[str, ...], column: str) -> list[Device]:
        found = self._devices.get((key, device_class, selectors))
        if found is not None and selectors in self._failed:
            self.errors.setdefault(column, self._failed[selectors])
        if found is None:
            devices = self.model.matching.get((key, device_class)) or []
            programs = self._programs.get(selectors)
            if programs is None:
                found = []
            else:
                try:
                    found = [d for d in devices if selectors_match(programs, d)]
                except ValueError as err:
                    self._failed[selectors] = f"selectors: CEL evaluation failed: {err}"
                    self.errors[column] = self._failed[selectors]
                    found = []
            self._devices[(key, device_class, selectors)] = found
        return found

    def counts(self, node: str, allocated: Mapping | None = None) -> dict[str, int]:
        """Column -> on the node: devices matching each selector column, claims each group column can serve
        (with `allocated`: from the devices still free)."""
        if not self.selectors and not self.groups:
            return {}
        if allocated is None and node in self._totals:
            return dict(self._totals[node])
        taken = allocated or {}
        pools = [(key, pool, [d for d in pool.devices if d.key in taken] if taken else [])
                 for key, pool in self._pools_of(node)]
        totals: dict[str, int] = {}
        for name, (device_class, selectors) in self.selectors.items():
            count = sum(free_count(self._matching(key, device_class, selectors, name), pool, taken, busy)
                        for key, pool, busy in pools)
            if count and name not in self.errors:
                totals[name] = count
        for name, group in self.groups.items():
            count = self._group_count(group, name, pools, taken)
            if count and name not in self.errors:
                totals[name] = count
        if allocated is None:
            self._totals[node] = dict(totals)
            for name, count in totals.items():
                self.largest[name] = max(self.largest.get(name, 0), count)
        return totals

    def _by_value(self, key, device_class: str, selectors: tuple[str, ...], attribute: str, column: str) -> dict:
        """The matching devices of a pool by their value of the attribute (those without it left out), kept."""
        cache_key = (key, device_class, selectors, attribute)
        found = self._values.get(cache_key)
        if found is None:
            found = {}
            for device in self._matching(key, device_class, selectors, column):
                value = _attribute(device, attribute)
                if value is not None:
                    found.setdefault(repr(value), []).append(device)
            self._values[cache_key] = found
        return found

    def _group_count(self, group: Group, name: str, pools, taken: Mapping) -> int:
        """Claims of the group the node's devices serve: per value of the attribute, the fewest any part's
        free devices of that value allow; summed over the values."""
        per_value: dict[object, list[int]] = {}
        for i, (device_class, selectors, count) in enumerate(group.parts):
            for key, pool, busy in pools:
                by_value = self._by_value(key, device_class, selectors, group.attribute, name)
                for value, devices in by_value.items():
                    free = per_value.setdefault(value, [0] * len(group.parts))
                    free[i] += free_count(devices, pool, taken, busy)
        return sum(min(free[i] // max(count, 1) for i, (_, _, count) in enumerate(group.parts))
                   for free in per_value.values())


# --- a pod's demand and why it can never be served ----------------------------------------------------------

def _pod_claim_specs(model: DeviceModel, spec: Mapping, namespace: str):
    """(claim entry name, what it names, the claim spec or None) per template claim of a pod."""
    for entry in spec.get("resourceClaims") or []:
        name = (entry or {}).get("resourceClaimTemplateName")
        if not name:
            continue
        template = model.templates.get(f"{namespace}/{name}")
        claim_spec = ((template or {}).get("spec") or {}).get("spec") if template is not None else None
        yield entry.get("name"), f"ResourceClaimTemplate {name}", name, claim_spec


# A pod claim entry the grouper rewrote to name its native PodGroup's claim (DRAWorkloadResourceClaims:
# grouper/native.py): the PodGroup's name; with `PODGROUP_TEMPLATE` and no `resourceClaimName`, the claim
# the PodGroup's template makes does not exist yet.
PODGROUP_CLAIM = "tas-extender.io/podGroup"
PODGROUP_TEMPLATE = "tas-extender.io/podGroupTemplate"


def podgroup_claims(podgroup: Mapping, spec: Mapping) -> Mapping:
    """A member pod's spec with each claim that matches one of its native PodGroup's `spec.resourceClaims`
    (same name, same ResourceClaim or ResourceClaimTemplate) naming the PodGroup's one claim instead: the
    named ResourceClaim, or the one made from the template (`status.resourceClaimStatuses`). Such a claim
    is allocated once for the whole group, so it is planned as a claim its pods share."""
    group_claims = {c.get("name"): c for c in (podgroup.get("spec") or {}).get("resourceClaims") or []
                    if isinstance(c, Mapping)}
    if not group_claims or not spec.get("resourceClaims"):
        return spec
    made = {s.get("name"): s.get("resourceClaimName")
            for s in (podgroup.get("status") or {}).get("resourceClaimStatuses") or [] if isinstance(s, Mapping)}
    group = str((podgroup.get("metadata") or {}).get("name") or "")
    entries = []
    for entry in spec["resourceClaims"]:
        mine = group_claims.get((entry or {}).get("name"))
        if mine is None or any(entry.get(k) != mine.get(k) for k in ("resourceClaimName", "resourceClaimTemplateName")):
            entries.append(entry)
            continue
        name = mine.get("resourceClaimName") or made.get(entry.get("name"))
        rewritten = {"name": entry.get("name"), PODGROUP_CLAIM: group}
        if name:
            rewritten["resourceClaimName"] = name
        else:
            rewritten[PODGROUP_TEMPLATE] = mine.get("resourceClaimTemplateName")
        entries.append(rewritten)
    return {**spec, "resourceClaims": entries}


def _allocated(claim: Mapping) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


def named_claims(model: DeviceModel, spec: Mapping, namespace: str):
    """(claim entry name, claim name, the ResourceClaim or None) per `resourceClaimName` of a pod."""
    for entry in spec.get("resourceClaims") or []:
        name = (entry or {}).get("resourceClaimName")
        if name:
            yield entry.get("name"), name, model.claims.get(f"{namespace}/{name}")


def _of_podgroup(spec: Mapping, entry_name) -> bool:
    return any((e or {}).get("name") == entry_name and (e or {}).get(PODGROUP_CLAIM)
               for e in spec.get("resourceClaims") or [])


def claim_spec_demand(claim_spec: Mapping, largest) -> dict[str, int]:
    """Column -> what one claim asks: per request its class (and its selector column), per constraint one
    of its group column. `largest(column)`: the most one node has (what `allocationMode: All` asks, and
    which `firstAvailable` alternative is counted)."""
    demand: dict[str, int] = {}
    asks = claim_asks(claim_spec, largest)
    for ask in asks:
        column = selector_column(ask.device_class, ask.selectors) if ask.selectors else None
        count = ask.count if not ask.all else max(largest(column or ask.device_class), 1)
        demand[ask.device_class] = demand.get(ask.device_class, 0) + count
        if column:
            demand[column] = demand.get(column, 0) + count
    for group in claim_groups(claim_spec):                     # firstAvailable: its first alternative
        demand[group.name] = demand.get(group.name, 0) + 1
    return demand


class ClaimDemand:
    """A pod's DRA demand and its problems, on one model and its request columns."""

    def __init__(self, model: DeviceModel, columns: RequestColumns):
        self.model = model
        self.columns = columns

    def largest(self, column: str) -> int:
        if column in self.model.classes:
            return self.model.largest_count(column)
        return self.columns.largest.get(column, 0)

    def demand(self, spec: Mapping, namespace: str) -> dict[str, int]:
        """Column -> devices (group columns: claims) a pending pod's template claims ask."""
        demand: dict[str, int] = {}
        for _, _, _, claim_spec in _pod_claim_specs(self.model, spec, namespace):
            for column, count in claim_spec_demand(claim_spec or {}, self.largest).items():
                demand[column] = demand.get(column, 0) + count
        return demand

    def problems(self, spec: Mapping, namespace: str) -> list[str]:
        """Why a pod's template claims, and the unallocated claims it names, can be allocated on no node
        (naming the claim, the request and the class); last, a missing template or claim (starting with
        WAITS_FOR: it may yet be created, as kube-scheduler waits for it)."""
        problems, waiting = [], []
        for claim, what, name, claim_spec in _pod_claim_specs(self.model, spec, namespace):
            if claim_spec is None:
                waiting.append(f"{WAITS_FOR}{what.split()[0]} {namespace}/{name} of claim {claim}, which does not exist")
                continue
            problems += self.spec_problems(f"claim {claim} ({what})", claim_spec)
        for entry in spec.get("resourceClaims") or []:
            if (entry or {}).get(PODGROUP_TEMPLATE) and not entry.get("resourceClaimName"):
                waiting.append(f"{WAITS_FOR}the ResourceClaim PodGroup {namespace}/{entry.get(PODGROUP_CLAIM)} makes "
                               f"from ResourceClaimTemplate {entry.get(PODGROUP_TEMPLATE)} for claim {entry.get('name')}, "
                               f"which does not exist yet")
        for entry, name, claim in named_claims(self.model, spec, namespace):
            if claim is None:
                waiting.append(f"{WAITS_FOR}ResourceClaim {namespace}/{name} of claim {entry}, which does not exist")
            elif not _allocated(claim):
                problems += self.spec_problems(f"claim {entry} (ResourceClaim {name})", claim.get("spec") or {})
        return problems + waiting

    def spec_problems(self, where: str, claim_spec: Mapping) -> list[str]:
        problems = []
        asks = claim_asks(claim_spec, self.largest)
        for ask in asks:
            count = max(ask.count, 1)
            head = f"{where} request {ask.request} asks {count if not ask.all else 'all'} of DeviceClass {ask.device_class}"
            why = self.model._class_problem(ask.device_class, count)
            if why is None and ask.selectors:
                column = selector_column(ask.device_class, ask.selectors)
                if column in self.columns.errors:
                    why = f"its selectors are skipped ({self.columns.errors[column]})"
                elif self.largest(column) < count:
                    why = (f"no node has {count} devices of the class matching the request's selectors "
                           f"(at most {self.largest(column)})")
            if why:
                problems.append(f"{head}: {why}")
        if problems:
            return problems
        for group in claim_groups(claim_spec):
            if group.name in self.columns.errors:
                problems.append(f"{where} constraint matchAttribute {group.attribute}: its selectors are skipped "
                                f"({self.columns.errors[group.name]})")
            elif self.largest(group.name) < 1:
                wanted = ", ".join(f"{count} of DeviceClass {c}" for c, _, count in group.parts)
                problems.append(f"{where} constraint matchAttribute {group.attribute}: no node has {wanted} "
                                f"sharing one value of {group.attribute}")
        return problems


# --- one pool: a class column and the extended resource it serves ------------------------------------------

@dataclass(frozen=True)
class Links:
    """Column pairs that count the same devices, on the nodes where they do: (a, b, node mask) each."""
    pairs: tuple[tuple[int, int, np.ndarray], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.pairs)

    def apply(self, nodes, rows: np.ndarray) -> np.ndarray:
        """Rows (one per entry of `nodes`) as used on those nodes: each column of a linked pair also takes
        what the row asks of the other (a class and its extended resource: both lowered by either). With
        two classes serving one extended resource on a node, asking it lowers both classes."""
        if not self.pairs:
            return rows
        original = np.asarray(rows, dtype=np.int64)
        single = original.ndim == 1
        if single:
            original = original[None, :]
        result = original.copy()
        nodes = np.atleast_1d(np.asarray(nodes, dtype=np.int64))
        for a, b, mask in self.pairs:
            if not (original[:, a].any() or original[:, b].any()):
                continue
            on = mask[nodes]
            if on.all():
                result[:, a] += original[:, b]
                result[:, b] += original[:, a]
            elif on.any():
                result[on, a] += original[on, b]
                result[on, b] += original[on, a]
        return result[0] if single else result

    def touches(self, row: np.ndarray) -> bool:
        """Whether a request row asks any linked column (else using it changes nothing linked)."""
        return any(row[a] or row[b] for a, b, _ in self.pairs)


# --- an unallocated claim several pods name ---------------------------------------------------------------

RESERVED_FOR_MAX = 256          # pods one ResourceClaim can be reserved for (ResourceClaimReservedForMaxSize)


@dataclass
class SharedClaim:
    """An unallocated ResourceClaim the pods of a gang name (`resourceClaimName`): allocated once, by
    kube-scheduler while it schedules the first of them, on one node (its devices are node-local); every
    other pod naming it then goes where it is allocated. So the plan counts its devices once, on one node,
    and puts all its pods there."""
    claim: str                       # namespace/name
    roles: dict[str, int]            # role -> its pods that name the claim
    demand: np.ndarray               # a row: what allocating it takes
    where: str                       # "claim <entry> (ResourceClaim <name>)" for refusals
    asks: str                        # "request gpus asks 8 of DeviceClass gpu.nvidia.com", for refusals
    podgroup: bool = False           # a native PodGroup's claim: reserved for the group, not for each pod

    @property
    def pods(self) -> int:
        return sum(self.roles.values())


def shared_claims(model: DeviceModel, resources, namespace: str, roles: Mapping[str, tuple[Mapping, int]],
                  largest) -> list[SharedClaim]:
    """The unallocated claims that `roles` (role -> (pod spec, pods)) name, each with the pods naming it."""
    found: dict[str, SharedClaim] = {}
    for role, (spec, pods) in roles.items():
        for entry, name, claim in named_claims(model, spec, namespace):
            if claim is None or _allocated(claim):
                continue
            key = f"{namespace}/{name}"
            shared = found.get(key)
            if shared is None:
                claim_spec = claim.get("spec") or {}
                asks = claim_asks(claim_spec, largest)
                text = "; ".join(f"request {a.request} asks {a.count if not a.all else 'all'} of DeviceClass "
                                 f"{a.device_class}" for a in asks) or "no request"
                shared = found[key] = SharedClaim(key, {}, resources.vector(claim_spec_demand(claim_spec, largest)),
                                                  f"claim {entry} (ResourceClaim {name})", text,
                                                  _of_podgroup(spec, entry))
            shared.roles[role] = shared.roles.get(role, 0) + pods
    return list(found.values())
