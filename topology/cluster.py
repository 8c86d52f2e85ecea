"""The cluster model: nodes, capacity matrices, topology trees, bound pods and plan reservations."""
from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import orjson

from .capacity import Capacity
from .dra import DeviceModel, allocated_devices, claim_consumers
from .dra_requests import ClaimDemand, Links, RequestColumns, SharedClaim, shared_claims
from .nodes import NodeInfo, PodPlacementRules
from .objects import ClusterObjects
from .resources import BASE_RESOURCES, ResourceIndex, pod_requests
from .sources import build_trees
from .tree import TopologyTree

TERMINATED_PHASES = ("Succeeded", "Failed")
REQUEST_MEMO_SIZE = 4096          # distinct pod request shapes kept per model (cleared when full)


def pod_key(pod: Mapping) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or metadata.get('generateName', '')}"


def is_bound_and_running(pod: Mapping) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName")) and \
        (pod.get("status") or {}).get("phase") not in TERMINATED_PHASES


@dataclass(frozen=True)
class Usage:
    node: int
    request: np.ndarray
    # a bound pod's: what its request was computed from (request_key), to know a later version asks the same
    fields: bytes | None = field(default=None, compare=False, repr=False)


def request_key(spec: Mapping) -> bytes | None:
    """Everything `pod_requests` reads of a pod spec (the containers' resources, the init containers'
    resources and restart policies, pod-level resources, overhead) as JSON: equal keys, equal requests, so two
    versions of a pod, or two pods of one template, compare without parsing their quantities. A copy, not
    references: a dict changed in place later does not change the key. None for a spec of another shape or
    not JSON (it is always parsed)."""
    containers, inits = spec.get("containers") or [], spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(inits, list) \
            or not all(isinstance(c, Mapping) for c in containers) or not all(isinstance(c, Mapping) for c in inits):
        return None
    try:
        return orjson.dumps([[c.get("resources") for c in containers],
                             [[c.get("resources"), c.get("restartPolicy")] for c in inits],
                             spec.get("resources"), spec.get("overhead")])
    except TypeError:                            # not JSON (a hand-made spec)
        return None


@dataclass(frozen=True)
class _Held:
    """Who holds an allocated claim (`status.reservedFor`) and the devices allocated to it."""
    pods: frozenset[str]                 # pod keys
    others: bool                         # reserved for something other than a pod too
    devices: frozenset[tuple[str, str, str]]
    rows: dict[int, np.ndarray] = field(default_factory=dict, compare=False)   # node -> its freed row there
    _counters: list = field(default_factory=list, compare=False)

    def counters(self, devices: DeviceModel) -> bool:
        """Whether its devices consume shared counters (what freeing them gives depends on the others)."""
        if not self._counters:
            self._counters.append(devices.shares_counters(self.devices))
        return self._counters[0]


def _held(claim: Mapping) -> _Held | None:
    """A claim's holders and devices, or None when it is not allocated."""
    devices = frozenset(allocated_devices([claim]))
    if not devices:
        return None
    others = any(not ((c or {}).get("resource") == "pods" and not c.get("apiGroup"))
                 for c in (claim.get("status") or {}).get("reservedFor") or [])
    return _Held(frozenset(claim_consumers(claim)), others, devices)


class Cluster:
    """Nodes in a fixed order with their matrices and trees. Pod and reservation changes are
    incremental; node set or label changes need a new Cluster."""

    def __init__(self, nodes: Iterable[NodeInfo], topology_objects: Iterable[Mapping] = (),
                 devices: DeviceModel | None = None):
        self.nodes: list[NodeInfo] = sorted(nodes, key=lambda n: n.name)
        self.node_index = {node.name: i for i, node in enumerate(self.nodes)}
        self.node_names = [node.name for node in self.nodes]
        self.devices = devices or DeviceModel()
        self.request_columns = RequestColumns(self.devices)
        self.claim_demand = ClaimDemand(self.devices, self.request_columns)
        dra_total = [self._dra_columns(node, self._device_counts(node.name)) for node in self.nodes]
        self.resources = ResourceIndex([name for node in self.nodes for name in node.allocatable]
                                       + [name for counts in dra_total for name in counts])
        allocatable = np.zeros((len(self.nodes), len(self.resources)), dtype=np.int64)
        for column, resource in enumerate(self.resources.names):
            allocatable[:, column] = [n.allocatable.get(resource, 0) + dra.get(resource, 0)
                                      for n, dra in zip(self.nodes, dra_total)]
        self.capacity = Capacity(allocatable)
        # per node, the DRA-counted columns (a bound pod's request of them is its claim's devices, counted
        # from the claim) and the devices allocated to claims, as a row
        self.dra_columns = np.zeros_like(allocatable, dtype=bool)
        for i, counts in enumerate(dra_total):
            self.dra_columns[i, [self.resources.column[name] for name in counts]] = True
        self.dra_used = np.zeros_like(allocatable)
        # who holds each allocated claim (eviction_usage), brought up to date when asked after claim events
        self._claims_dirty = True
        self._claims_seen: dict[str, Mapping] = {}
        self._held: dict[str, _Held] = {}
        self._pod_claims: dict[str, set[str]] = {}
        self.links = self._links()
        if self.devices.allocated:
            self.claims_changed(sorted(self.node_index[n] for n in self.devices.allocated_nodes() if n in self.node_index))
        self.topology_objects = list(topology_objects)
        self.topologies = build_trees(self.topology_objects, self.nodes)
        self.pods: dict[str, Usage] = {}
        self._requests: dict[bytes, np.ndarray] = {}     # request_key -> the request row
        self.reservations: dict[str, Usage] = {}      # what each holds of its node (see hold_for)
        # A reservation's pod (hold_for) and back. kube-scheduler allocates a pod's claims (the one it makes
        # for a DRA-backed extended resource, those of its templates) before it binds the pod: from then on
        # the claims count its devices, so its reservation holds no DRA columns (never the devices twice).
        self.holders: dict[str, str] = {}
        self._held_by: dict[str, str] = {}
        self._asked: dict[str, np.ndarray] = {}       # reservation key -> its whole request, where it holds less
        self._claimed: Counter[str] = Counter(pod for claim in self.devices.claims.values()
                                              for pod in claim_consumers(claim))
        # Pod or reservation key -> its gang, for the pods an exclusive gang must not share a domain with
        # (other LeaderWorkerSet groups, other exclusive gangs); which pods those are is the caller's call.
        self.apart: dict[str, str] = {}
        self._base_usable = self._compute_base_usable()

    def _dra_columns(self, node: NodeInfo, counts: Mapping[str, int]) -> dict[str, int]:
        """A node's DRA columns from its class counts: one per class, and the extended resource a class
        serves where the node's allocatable lacks it (where it has it, the device plugin serves it)."""
        columns = dict(counts)
        for name, resource in self.devices.extended_resources().items():
            if name in counts and resource not in node.allocatable:
                columns[resource] = columns.get(resource, 0) + counts[name]
        return columns

    def _device_counts(self, node: str, allocated: Mapping | None = None) -> dict[str, int]:
        """Per class, selector and group column (topology/dra_requests.py): the node's devices (with
        `allocated`: those still free)."""
        return self.devices.counts(node, allocated) | self.request_columns.counts(node, allocated)

    def _links(self) -> Links:
        """A class column and the extended resource it serves on a node count the same devices there:
        using or reserving either lowers both (one pool, not two)."""
        pairs = []
        for name, resource in self.devices.extended_resources().items():
            if name not in self.resources.column or resource not in self.resources.column:
                continue
            pair = self.resources.column[name], self.resources.column[resource]
            mask = self.dra_columns[:, pair[0]] & self.dra_columns[:, pair[1]]   # the class serves it there (_dra_columns)
            if mask.any():
                pairs.append((*pair, mask))
        return Links(tuple(pairs))

    def linked(self, nodes, rows: np.ndarray) -> np.ndarray:
        """What rows used on these nodes take from each column (`Links.apply`: one pool of devices)."""
        return self.links.apply(nodes, rows)

    def claim_columns_missing(self, claim: Mapping | None) -> bool:
        """Whether an unallocated claim asks a selector or group column this model lacks (a new model counts it)."""
        if claim is None or ((claim.get("status") or {}).get("allocation")):
            return False
        return not self.request_columns.knows(claim.get("spec") or {})

    def claims_changed(self, nodes: Iterable[int]) -> None:
        """Apply the model's allocated devices to these nodes' DRA columns (after a claim event)."""
        self._claims_dirty = True
        for i in nodes:
            node = self.nodes[i]
            free = self._dra_columns(node, self._device_counts(node.name, self.devices.allocated))
            used = np.zeros(len(self.resources), dtype=np.int64)
            for column in np.flatnonzero(self.dra_columns[i]):      # the node's devices: allocatable less its own
                name = self.resources.names[column]
                used[column] = self.capacity.allocatable[i, column] - node.allocatable.get(name, 0) - free.get(name, 0)
            self.capacity.use(i, used - self.dra_used[i])
            self.dra_used[i] = used

    def claim_changed(self, before: Mapping | None, after: Mapping | None) -> list[int]:
        """A ResourceClaim changed (None: absent before / deleted): the model's devices follow, the nodes of
        its pools are counted again, and the reservations of the pods it is reserved for hold their devices
        or not (hold_for). The nodes where room was freed."""
        touched = {self.node_index[n] for n in self.devices.apply_claim(before, after) if n in self.node_index}
        pods = set()
        for claim, sign in ((before, -1), (after, 1)):
            for pod in claim_consumers(claim) if claim is not None else ():
                self._claimed[pod] += sign
                if self._claimed[pod] <= 0:
                    del self._claimed[pod]
                pods.add(pod)
        holds = [self._held_by[pod] for pod in pods if pod in self._held_by]
        nodes = sorted(touched | {self.reservations[k].node for k in holds if k in self.reservations})
        free_before = self.capacity.free[nodes].copy()
        self.claims_changed(touched)
        for key in holds:
            self._hold_again(key)
        return [i for i, grew in zip(nodes, (self.capacity.free[nodes] > free_before).any(axis=1)) if grew]

    def devices_changed(self, nodes: Iterable[int]) -> bool:
        """Apply the model's device counts to these nodes' rows in place (after a slice or class event):
        allocatable, then the devices claims use. False, changing nothing, when a node would count a DRA
        column it does not count yet (a new column, or one its bound pods' requests were counted in): that
        needs a new Cluster."""
        if self.request_columns.selectors or self.request_columns.groups:
            return False        # selector and group columns are counted from the model they were built on
        nodes = list(nodes)
        totals = [self._dra_columns(self.nodes[i], self.devices.counts(self.nodes[i].name)) for i in nodes]
        for i, total in zip(nodes, totals):
            for name in total:
                column = self.resources.column.get(name)
                if column is None or not self.dra_columns[i, column]:
                    return False
        for i, total in zip(nodes, totals):
            node = self.nodes[i]
            row = self.capacity.allocatable[i].copy()
            for column in np.flatnonzero(self.dra_columns[i]):
                name = self.resources.names[column]
                row[column] = node.allocatable.get(name, 0) + total.get(name, 0)
            self.capacity.set_allocatable(i, row)
        self.claims_changed(nodes)
        for held in self._held.values():        # what freeing a claim gives depends on the devices and classes
            held.rows.clear()
            held._counters.clear()
        return True

    @classmethod
    def from_objects(cls, objects: ClusterObjects) -> "Cluster":
        nodes = [NodeInfo.from_object(n) for n in objects.nodes]
        dra = {kind: [o for o in objects.devices if o.get("kind") == kind]
               for kind in ("DeviceClass", "ResourceSlice", "ResourceClaim", "ResourceClaimTemplate")}
        devices = DeviceModel(dra["DeviceClass"], dra["ResourceSlice"], dra["ResourceClaim"], nodes,
                              dra["ResourceClaimTemplate"])
        cluster = cls(nodes, objects.topologies, devices)
        for pod in objects.pods:
            cluster.add_pod(pod)
        return cluster

    def pod_demand(self, spec: Mapping, namespace: str) -> dict[str, int]:
        """A pending pod's demand: its effective request (pod_requests) and the devices its
        `spec.resourceClaims` ask from their ResourceClaimTemplates: per DeviceClass, and per selector and group
        column (topology/dra_requests.py). A claim it names by `resourceClaimName` adds nothing here: allocated,
        its devices are used; unallocated, the plan counts it once for all its pods (`shared_claims`). The one
        place a pod to plan becomes amounts; a bound pod's devices are its allocated claims' instead."""
        amounts = pod_requests(spec)
        for column, count in self.claim_demand.demand(spec, namespace).items():
            amounts[column] = amounts.get(column, 0) + count
        return amounts

    def claim_problems(self, spec: Mapping, namespace: str) -> list[str]:
        """Why a pod's claims can be allocated on no node (topology/dra_requests.py ClaimDemand.problems)."""
        return self.claim_demand.problems(spec, namespace)

    def shared_claims(self, namespace: str, roles: Mapping[str, tuple[Mapping, int]]) -> list[SharedClaim]:
        """The unallocated ResourceClaims that pods of these roles (role -> (pod spec, pods)) name: each is
        allocated once for all its pods, so the plan counts it once (topology/dra_requests.py)."""
        return shared_claims(self.devices, self.resources, namespace, roles, self.claim_demand.largest)

    def claim_nodes(self, spec: Mapping, namespace: str) -> np.ndarray | None:
        """Nodes where the allocated claims a pod names may be used (None: it names none)."""
        if not self.devices.names_claims(spec):
            return None
        return np.fromiter((self.devices.claim_allows(spec, namespace, n) for n in self.nodes),
                           dtype=bool, count=len(self.nodes))

    def asks_devices(self, spec: Mapping, namespace: str) -> bool:
        """Whether kube-scheduler's DynamicResources plugin decides where this pending pod fits, on some node:
        it has `spec.resourceClaims`, or it asks a resource some node counts from DRA devices (a class
        column, or an extended resource a class serves where that node's allocatable lacks it; where the
        allocatable has it, the device plugin serves it and NodeResourcesFit decides)."""
        if spec.get("resourceClaims"):
            return True
        columns = [self.resources.column[name] for name, amount in self.pod_demand(spec, namespace).items()
                   if amount > 0 and name in self.resources.column]
        return bool(columns) and bool(self.dra_columns[:, columns].any())

    # --- what an eviction frees ------------------------------------------------------------------
    def _claim_holders(self) -> tuple[dict[str, set[str]], dict[str, "_Held"]]:
        """(pod key -> the allocated claims it holds, claim -> who holds it and its devices), from each
        claim's `status.reservedFor` and allocation. Kept up to date after claim events (`claims_changed`):
        only the claims whose object changed (each event brings a new one) are read again."""
        if self._claims_dirty:
            claims, seen = self.devices.claims, self._claims_seen
            changed = [key for key, claim in claims.items() if seen.get(key) is not claim]
            gone = [key for key in seen if key not in claims] if changed or len(seen) != len(claims) else []
            for key in changed + gone:
                old = self._held.pop(key, None)
                seen.pop(key, None)
                for pod in old.pods if old is not None else ():
                    self._pod_claims[pod].discard(key)
                    if not self._pod_claims[pod]:
                        del self._pod_claims[pod]
            for key in changed:
                seen[key] = claims[key]
                held = _held(claims[key])
                if held is not None:
                    self._held[key] = held
                    for pod in held.pods:
                        self._pod_claims.setdefault(pod, set()).add(key)
            self._claims_dirty = False
        return self._pod_claims, self._held

    def claim_holders(self) -> dict[str, frozenset[str]]:
        """Bound pods holding allocated claims -> the bound pods sharing one of those claims (itself included)."""
        by_pod, holders = self._claim_holders()
        shared: dict[str, frozenset[str]] = {}
        for key, claims in by_pod.items():
            if key in self.pods:
                shared[key] = frozenset(p for c in claims for p in holders[c].pods if p in self.pods)
        return shared

    def _counted_on(self, claim: str, bound: list[str]) -> str:
        """The holder whose eviction row counts a claim: the first (key order) on a node of its devices."""
        if len(bound) == 1:
            return bound[0]
        nodes = self.devices.claim_nodes(self.devices.claims[claim])
        local = [p for p in bound if self.node_names[self.pods[p].node] in nodes]
        return min(local or bound)

    def _freed_row(self, node: int, devices: Collection[tuple[str, str, str]]) -> np.ndarray:
        """The node's DRA columns gained once these allocated devices are free."""
        info = self.nodes[node]
        gain = self.resources.vector(self._dra_columns(info, self.devices.freed_counts(info.name, devices)))
        return np.where(self.dra_columns[node], gain, 0)

    def eviction_usage(self, key: str, together: Collection[str] = ()) -> np.ndarray:
        """What evicting the bound pod `key` frees on its node, as a row: its request, and the devices of its
        allocated claims that no remaining pod holds (`status.reservedFor`; `together`: the pods evicted
        with it). A claim several of them hold is counted once, on the first of them (key order) on a node
        of its devices, so the rows of pods evicted together add up; a claim a remaining pod (or another
        consumer) holds frees nothing. Devices count by the node's columns after the claims are gone
        (shared counters included: one freed MIG instance may give back a whole GPU). The one rule of the
        victim search, the what-if advice and the preemptor's re-check; the devices are free in the model
        only once the claim is deallocated (its event), not at the eviction. A claim's row on a node is
        kept with the claim (its devices and the model's classes decide it) where no counters are shared."""
        usage = self.pods[key]
        by_pod, holders = self._claim_holders()
        going = set(together) | {key}
        freed = []
        for claim in by_pod.get(key, ()):
            held = holders[claim]
            bound = [p for p in held.pods if p in self.pods]
            if held.others or not going.issuperset(bound) or self._counted_on(claim, bound) != key:
                continue
            freed.append(held)
        if not freed:
            return usage.request.copy()
        row = usage.request.copy()
        if any(held.counters(self.devices) for held in freed):    # not additive: all freed devices at once
            return row + self._freed_row(usage.node, [d for held in freed for d in held.devices])
        for held in freed:
            gain = held.rows.get(usage.node)
            if gain is None:
                gain = held.rows[usage.node] = self._freed_row(usage.node, held.devices)
            row += gain
        return row

    # --- pods ------------------------------------------------------------------------------------
    def add_pod(self, pod: Mapping) -> bool:
        """Account a bound, non-terminated pod (replacing an earlier version of it). False if it uses nothing."""
        key = pod_key(pod)
        node = self.node_index.get(pod["spec"]["nodeName"]) if is_bound_and_running(pod) else None
        if node is None:
            self.remove_pod(key)
            return False
        spec = pod["spec"]
        fields = request_key(spec)
        usage = self.pods.get(key)
        if usage is not None and usage.node == node and fields is not None and usage.fields == fields:
            self.apart.pop(key, None)              # as remove_pod does (the caller marks it again)
            return True                            # a later version asking the same on the same node
        self.remove_pod(key)
        try:
            request = self._request_vector(spec, fields)
        except ValueError as err:
            raise ValueError(f"Pod {key}: {err}") from err
        request[self.dra_columns[node]] = 0        # its devices are counted from its allocated claims
        self.pods[key] = Usage(node, request, fields)
        self.capacity.use(node, request)
        return True

    def _request_vector(self, spec: Mapping, memo: bytes | None) -> np.ndarray:
        """The pod's request as a row of this model's resource columns (a new array). The pods of one
        template ask the same: the row is kept per request_key."""
        known = self._requests.get(memo) if memo is not None else None
        if known is not None:
            return known.copy()
        request = self.resources.vector(pod_requests(spec))
        if memo is not None:
            if len(self._requests) >= REQUEST_MEMO_SIZE:
                self._requests.clear()
            self._requests[memo] = request.copy()
        return request

    def remove_pod(self, key: str) -> None:
        self.apart.pop(key, None)
        usage = self.pods.pop(key, None)
        if usage is not None:
            self.capacity.use(usage.node, usage.request, sign=-1)

    # --- reservations held by plans -----------------------------------------------------------------
    def reserve(self, key: str, node: int, request: np.ndarray, apart: str | None = None,
                pod: str | None = None) -> None:
        """Hold `request` on `node` for `key`; `apart`: the gang, when exclusive gangs keep away from it;
        `pod`: the pod that holds it (hold_for)."""
        self.release(key)
        if pod is not None:
            self._set_holder(key, pod)
        request = self.linked(node, np.asarray(request, dtype=np.int64))
        usage = self.reservations[key] = Usage(node, self._holding(key, node, request))
        self.capacity.reserve(node, usage.request)
        if apart is not None:
            self.apart[key] = apart

    def hold_for(self, key: str, pod: str | None) -> None:
        """The pod (namespace/name; None: none now) that holds reservation `key`. While some claim allocated
        to it names it in `status.reservedFor`, the reservation holds none of its node's DRA columns: the
        claim's devices are counted as used already, until the pod is bound and its reservation released."""
        self._set_holder(key, pod)
        self._hold_again(key)

    def _set_holder(self, key: str, pod: str | None) -> None:
        old = self.holders.pop(key, None)
        if old is not None and self._held_by.get(old) == key:
            del self._held_by[old]
        if pod is not None:
            other = self._held_by.get(pod)
            if other is not None and other != key:
                self.holders.pop(other, None)
                self._hold_again(other)
            self.holders[key], self._held_by[pod] = pod, key

    def holding(self, node: int, request: np.ndarray, pod: str | None) -> np.ndarray:
        """What a reservation of `request` on `node` held by `pod` holds (what must be free for it): all of
        it, or none of the node's DRA columns while a claim allocated to the pod names it (hold_for)."""
        columns = self.dra_columns[node]
        if pod is None or pod not in self._claimed or not request[columns].any():
            return request
        held = request.copy()
        held[columns] = 0
        return held

    def _holding(self, key: str, node: int, request: np.ndarray) -> np.ndarray:
        """`holding` for reservation `key`; the whole request kept in `_asked` where it holds less."""
        self._asked.pop(key, None)
        held = self.holding(node, request, self.holders.get(key))
        if held is not request:
            self._asked[key] = request
        return held

    def _hold_again(self, key: str) -> None:
        usage = self.reservations.get(key)
        if usage is None:
            return
        held = self._holding(key, usage.node, self._asked.get(key, usage.request))
        if not np.array_equal(held, usage.request):
            self.capacity.reserve(usage.node, held - usage.request)
            self.reservations[key] = Usage(usage.node, held)

    def reserve_many(self, keys: list[str], nodes: np.ndarray, requests: np.ndarray, apart: str | None = None) -> None:
        """`reserve` for many keys at once (rows of `requests`); one array update for all of them."""
        for key in keys:
            self.release(key)
        requests = self.linked(nodes, np.asarray(requests, dtype=np.int64))
        for key, node, request in zip(keys, nodes.tolist(), requests):
            self.reservations[key] = Usage(node, request)
        self.capacity.reserve_many(nodes, requests)
        if apart is not None:
            self.apart.update(dict.fromkeys(keys, apart))

    def release(self, key: str) -> None:
        self.apart.pop(key, None)
        self._set_holder(key, None)
        self._asked.pop(key, None)
        usage = self.reservations.pop(key, None)
        if usage is not None:
            self.capacity.reserve(usage.node, usage.request, sign=-1)

    def apart_count(self, gang: str, skip: Collection[str] = ()) -> np.ndarray:
        """Per node, the pods and reservations an exclusive group of `gang` must not share a domain with
        (those `apart` marks for another gang; `skip`: keys that are the gang's own all the same). The one
        count of exclusive occupancy: the service's (app/scheduling/occupancy.py) and the offline tools'."""
        counts = np.zeros(len(self.nodes), dtype=np.int64)
        for key, owner in self.apart.items():
            usage = self.pods.get(key) or self.reservations.get(key)
            if owner != gang and usage is not None and key not in skip:
                counts[usage.node] += 1
        return counts

    def apart_nodes(self, gang: str) -> np.ndarray:
        """Nodes running or holding pods that an exclusive group of `gang` must not share a domain with."""
        return self.apart_count(gang) > 0

    # --- nodes ----------------------------------------------------------------------------------
    def update_node_status(self, node: NodeInfo) -> bool:
        """Apply readiness / taint / cordon changes in place. False when labels or allocatable changed,
        which needs `rebuilt`."""
        index = self.node_index.get(node.name)
        if index is None:
            return False
        old = self.nodes[index]
        if old.labels != node.labels or old.allocatable != node.allocatable:
            return False
        self.nodes[index] = node
        self._base_usable[index] = self._node_plainly_usable(node)
        return True

    @staticmethod
    def _node_plainly_usable(node: NodeInfo) -> bool:
        return node.ready and not node.unschedulable and not node.taints

    def _compute_base_usable(self) -> np.ndarray:
        return np.fromiter((self._node_plainly_usable(n) for n in self.nodes), dtype=bool, count=len(self.nodes))

    def usable(self, rules: PodPlacementRules) -> np.ndarray:
        """Nodes a pod with these rules may use. Only nodes with taints, or all nodes when the pod has
        selectors, are checked one by one; the rest come from a precomputed mask."""
        if not rules.node_selector and not (rules.spec.get("affinity") or {}).get("nodeAffinity"):
            mask = self._base_usable.copy()
            for i in np.flatnonzero(~mask):
                mask[i] = rules.allows(self.nodes[i]) is None
            return mask
        return np.fromiter((rules.allows(n) is None for n in self.nodes), dtype=bool, count=len(self.nodes))

    # --- views ----------------------------------------------------------------------------------
    @property
    def free(self) -> np.ndarray:
        return self.capacity.free

    def unusable_nodes(self) -> np.ndarray:
        """Nodes no ordinary pod can land on: NotReady, cordoned, or with a NoSchedule / NoExecute taint
        other than an extended resource's (`nvidia.com/gpu`), which admission tolerates for the pods that
        request it (ExtendedResourceToleration). Their free capacity is shown apart, not as free."""
        extended = set(self.resources.names) - set(BASE_RESOURCES)
        return np.fromiter((not n.ready or n.unschedulable or any(
            t.get("effect") in ("NoSchedule", "NoExecute") and t.get("key") not in extended for t in n.taints)
            for n in self.nodes), dtype=bool, count=len(self.nodes))

    def usable_free(self) -> tuple[np.ndarray, np.ndarray]:
        """(free capacity on usable nodes, free capacity on unusable ones), never negative."""
        free = np.maximum(self.capacity.free, 0)
        unusable = self.unusable_nodes()[:, None]
        return np.where(unusable, 0, free), np.where(unusable, free, 0)

    @property
    def topology_errors(self) -> dict[str, str]:
        """Why each defined topology that could not be built is invalid (name -> message)."""
        return self.topologies.errors

    def topology(self, name: str) -> TopologyTree:
        if name in self.topologies:
            return self.topologies[name]
        if name in self.topology_errors:
            raise KeyError(f"topology {name!r} is invalid: {self.topology_errors[name]}")
        valid = ", ".join(sorted(self.topologies)) or "none defined"
        raise KeyError(f"unknown topology {name!r}; valid topologies: {valid}")
