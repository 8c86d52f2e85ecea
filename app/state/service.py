"""ServiceState: everything the service knows, fed by a cluster source (it is the ObjectSink).

- `objects`: the latest version of every watched object (owner lookups, the webhook's cache);
- `cluster`: the topology Cluster (nodes, capacity, trees), rebuilt when nodes or topologies change
  and updated in place on pod events and node status changes;
- `book` (app/state/gangs.py): the one writer of gang plans and slots; read them as `plans` (the
  PlanStore, whose reservations are kept in the Cluster) and `bound` (which gang slots are held by bound
  pods, from the placement annotations written at bind: what lets a restarted service continue partly
  bound gangs).

One re-entrant lock serialises every change; request handlers take it too.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence

from grouper import group_workload
from grouper.kinds import suspended
from grouper.names import GANG_ANNOTATION, PODGROUP_KEYS, SLOT_ANNOTATION, reservation_key  # noqa: F401 - app.state exports them
from grouper.native import scheduling_group
from grouper.podgroups import is_podgroup
from topology.cluster import Cluster, is_bound_and_running, pod_key
from topology.dra import DeviceModel
from topology.groups import Slot
from topology.nodes import NodeInfo
from topology.objects import api_group

from ..logs import fields, get_logger
from ..metrics import Metrics
from ..ports import WATCHED_KINDS, EventType, WatchedKind, watches
from ..settings import Settings
from .changes import NodeChanges
from .gangs import GangBook
from .identities import IdentityCache, podgroup_member_key
from .objects import ObjectCache
from .plans import PlanStore
from .workload_pods import WorkloadPods

log = get_logger(__name__)

EXPIRY_SCAN_INTERVAL = 1.0                     # seconds between the filter path's TTL scans

TOPOLOGY_KINDS = {("kai.scheduler", "Topology"), ("kueue.x-k8s.io", "Topology"),
                  ("topology.volcano.sh", "HyperNode")}
# A stale model is rebuilt by refresh() (before each verb), or by a timer this long after it went stale, so that gangs on
# deleted nodes are re-planned (and their pods woken) even when no request reads the model meanwhile.
STALE_REBUILD_DELAY = 0.2
DRA_GROUP = "resource.k8s.io"
# kept in place: a slice's pool, a class's devices (topology/dra.py), a claim's devices; a template's change
# builds a new model (the demand of the pods that name it)
SLICE_KINDS = {(DRA_GROUP, "ResourceSlice")}
CLASS_KINDS = {(DRA_GROUP, "DeviceClass")}
DEVICE_KINDS = SLICE_KINDS | CLASS_KINDS | {(DRA_GROUP, "ResourceClaimTemplate")}
CLAIM_KINDS = {(DRA_GROUP, "ResourceClaim")}


def kind_of(obj: Mapping) -> WatchedKind:
    """The WatchedKind of an object (a synthetic one for kinds the service does not watch)."""
    group, kind = api_group(obj), obj.get("kind", "")
    for watched in WATCHED_KINDS:
        if watched.group == group and watched.kind == kind:
            return watched
    # not watched by default (a custom kind of Settings.extra_kinds, or one added to the standalone cluster)
    version = (obj.get("apiVersion") or "v1").rsplit("/", 1)[-1]
    return WatchedKind(group, version, kind.lower() + "s", kind, bool((obj.get("metadata") or {}).get("namespace")))


def kind_named(kind: str, group: str = "") -> WatchedKind:
    return next(w for w in WATCHED_KINDS if w.kind == kind and w.group == group)


NODE_KIND = kind_named("Node")
POD_KIND = kind_named("Pod")


class ServiceState:
    def __init__(self, settings: Settings | None = None, *,
                 clock: Callable[[], float] = time.time, elector=None,
                 on_nodes_changed: Callable[[set[str]], None] | None = None,
                 on_pod_changed: Callable[[str | None, Mapping | None], None] | None = None):
        """The engine that owns this state passes its two observers, called under the lock:
        `on_nodes_changed` with the names of nodes that were deleted or turned unusable, or lost a slot's
        reservation (it re-plans); `on_pod_changed` with (pod key, pod) when a pod changed, (pod key, None)
        when it is gone, and (None, None) when every pod was listed again (read them from `objects`): for
        indexes kept as pods come and go, so that nothing walks every pod on a request's path.
        `elector` (anything with is_leader(), when leader election is on) is fixed here: `elector` is read-only.
        The state holds no writer: the engine reaches the cluster through its own (app.scheduling)."""
        self.settings = settings or Settings()
        self._elector = elector
        self.clock = clock
        self.objects = ObjectCache()
        self.metrics = Metrics()
        self.metrics.watch_state(self)
        self.lock = threading.RLock()
        self._cluster = Cluster([], [])
        self._warned_class_errors: dict[str, str] = {}       # DeviceClass -> the error last warned about
        self.generation = 0                      # bumped on every change that may change a plan's outcome
        self.rebuilds = 0                        # bumped whenever `cluster` is replaced (nodes, topologies)
        self.pods_added = 0                      # bumped when a pod appears (a gang waiting for members may be whole)
        self.changes = NodeChanges()             # per node: when room was freed / pods started (refusal cache)
        self.synced_once = False
        self.served_versions: dict[tuple[str, str], str] = {}    # (group, kind) -> version the source lists
        # the one writer of gang plans and slots (app/state/gangs.py): the engine and the events below
        self.book = GangBook(lambda: self._cluster, self.changes, lambda: self.clock(),
                             lambda: self.settings.reservation_ttl, self._changed,
                             lambda key: self.find_pod(*key.split("/", 1)))
        self._bound_locally: dict[str, str] = {}                  # pod key -> node, until the watch says so
        # grouper answers (the engine's and the webhook's), always with the cluster's PriorityClasses
        self.identities = IdentityCache(lambda: self.objects.list("PriorityClass"))
        self.podgroup_pods: dict[tuple[str, str], dict[str, Mapping]] = {}  # (namespace, group) -> pods
        # (namespace, group) -> a number that changes whenever a member joins, leaves or changes what its
        # grouping reads (never repeated: identities are cached per member set by it)
        self.podgroup_versions: dict[tuple[str, str], int] = {}
        self._podgroup_counter = 0
        self.workload_pods = WorkloadPods()      # live pods per workload (a gang waits for all of them)
        self._dirty = True
        self._settle: threading.Timer | None = None          # the pending rebuild of a stale model
        self._next_expiry_scan = float("-inf")   # expire_due() scans again from then on
        self._on_nodes_changed = on_nodes_changed
        self._on_pod_changed = on_pod_changed
        # what else keeps the service unready, each a reason or None (the listeners' serving certificate)
        self.readiness_checks: list[Callable[[], str | None]] = []

    def watches(self, api_group: str, kind: str) -> bool:
        """Whether a live source feeds objects of this kind (WATCHED_KINDS and the extra kinds)."""
        return watches(self.settings.watched_kinds, api_group, kind)

    # --- readiness -------------------------------------------------------------------------------
    @property
    def elector(self):
        return self._elector

    def is_leader(self) -> bool:
        return self._elector is None or bool(self._elector.is_leader())

    def serving(self) -> bool:
        """Whether this replica answers as the leader: it leads, or it is handing its Lease over (the elector's
        `serving()`, when it has one)."""
        if self._elector is None:
            return True
        return bool(getattr(self._elector, "serving", self._elector.is_leader)())

    def ready(self) -> tuple[bool, str]:
        if not self.synced_once:
            return False, "waiting for the first full sync of the cluster"
        if self.settings.leader_elect and not self.serving():
            return False, "not the leader (standby)"
        for check in self.readiness_checks:
            problem = check()
            if problem:
                return False, problem
        return True, "ok"

    def _pod_changed(self, key: str | None, pod: Mapping | None) -> None:
        if self._on_pod_changed is not None:
            self._on_pod_changed(key, pod)

    # --- ObjectSink ---------------------------------------------------------------------------------
    def replace(self, kind: WatchedKind, objects: Sequence[Mapping]) -> None:
        with self.lock:
            self.served_versions[(kind.group, kind.kind)] = kind.version
            self.objects.replace(kind, objects)
            if kind.kind == "Pod":
                self.book.pods_listed(self.objects.list("Pod"))
                self.podgroup_pods.clear()
                self.podgroup_versions.clear()
                for pod in objects:
                    self._index_podgroup("ADDED", pod)
                self.workload_pods.replace(objects)
            if kind.kind in ("Node", "Pod") or (kind.group, kind.kind) in TOPOLOGY_KINDS | DEVICE_KINDS \
                    or (kind.group, kind.kind) in CLAIM_KINDS:
                self._dirty = True
                if self.synced_once:
                    self._rebuild()
            if kind.kind == "Pod":
                self._pod_changed(None, None)
                self.book.reconcile()
            else:                             # a relist after a gap in the watch: deletions it missed
                self._drop_plans_of(kind, lambda namespace, name: self.objects.get(
                    kind.kind, namespace, name, group=kind.group) is None, "is gone")

    def apply(self, kind: WatchedKind, event: EventType, obj: Mapping) -> None:
        with self.lock:
            before = None
            if kind.kind == "Pod":
                obj = self._keep_local_binding(event, obj)
            elif kind.kind != "Node":
                metadata = obj.get("metadata") or {}
                namespace = metadata.get("namespace") or ("default" if kind.namespaced else "")
                before = self.objects.get(kind.kind, namespace, metadata.get("name"), group=kind.group)
            self.objects.apply(kind, event, obj)
            if kind.kind == "Pod":
                if event == "ADDED":
                    self.pods_added += 1
                if event == "DELETED":
                    self.book.pod_deleted(pod_key(obj))
                self._index_podgroup(event, obj)
                self.workload_pods.apply(event, obj)
                self._on_pod(event, obj)
            elif (kind.group, kind.kind) in CLAIM_KINDS:
                self._on_claim(before, None if event == "DELETED" else obj)
            elif (kind.group, kind.kind) in SLICE_KINDS:
                self._on_devices(self._cluster.devices.apply_slice, before, None if event == "DELETED" else obj)
            elif (kind.group, kind.kind) in CLASS_KINDS:
                self._on_devices(self._cluster.devices.apply_class, before, None if event == "DELETED" else obj)
            elif (kind.group, kind.kind) in DEVICE_KINDS:
                self._stale()
            elif kind.kind == "Node" or (kind.group, kind.kind) in TOPOLOGY_KINDS:
                if not self.synced_once:
                    self._dirty = True          # rebuilt once, when the first sync completes
                elif kind.kind == "Node":
                    self._on_node(event, obj)
                else:
                    self._rebuild()
            else:
                self._on_workload(kind, event, obj, before)

    def _on_claim(self, before: Mapping | None, after: Mapping | None) -> None:
        """A ResourceClaim changed: the devices it holds follow, on the nodes of its pools only. Devices a
        deallocated claim held count as free from this event on, not before."""
        self.generation += 1
        if self._dirty or not self.synced_once:
            self._dirty = True
            return
        cluster = self._cluster
        if cluster.claim_columns_missing(after):
            self._stale()                   # an unallocated claim asking selectors or constraints not counted yet
            return
        for i in cluster.claim_changed(before, after):
            self.changes.note_freed(i)

    def _on_devices(self, apply: Callable[[Mapping | None, Mapping | None], set[str] | None],
                    before: Mapping | None, after: Mapping | None) -> None:
        """A ResourceSlice or DeviceClass changed: the model applies it in place (`apply`: the DeviceModel's
        apply_slice / apply_class) and the touched nodes' rows follow. A change of columns (a new class, a
        class newly skipped, a node counting a column it did not), or a node left holding more than it
        has, builds a new model instead (which re-reserves the slots held)."""
        self.generation += 1
        if self._dirty or not self.synced_once:
            self._dirty = True
            return
        cluster = self._cluster
        touched = apply(before, after)
        rows = sorted(cluster.node_index[n] for n in touched or () if n in cluster.node_index)
        before_free = cluster.capacity.free[rows].copy()
        if touched is None or not cluster.devices_changed(rows):
            self._stale()
            return
        short = (cluster.capacity.free[rows] < 0) & (before_free >= 0) & cluster.dra_columns[rows]
        if short.any():                         # devices gone under a reservation or a claim: hold them again
            self._stale()
            return
        self._warn_class_errors(cluster.devices.errors)
        for i, row in zip(rows, cluster.capacity.free[rows] > before_free):
            if row.any():
                self.changes.note_freed(i)

    def _warn_class_errors(self, errors: Mapping[str, str]) -> None:
        """One warning per DeviceClass error not warned about yet, whichever model found it: a new one, or
        the current one after a slice applied in place brought devices its CEL fails on."""
        for name, error in sorted(errors.items()):
            if self._warned_class_errors.get(name) != error:
                log.warning("DeviceClass %s skipped: its devices are not counted: %s", name, error,
                            extra=fields(deviceclass=name))
        self._warned_class_errors = dict(errors)

    def _devices(self, nodes: Sequence[NodeInfo]) -> DeviceModel:
        """A new DeviceModel, taking over the CEL answers and parsed slices of the current one."""
        return DeviceModel(self.objects.list("DeviceClass", DRA_GROUP), self.objects.list("ResourceSlice", DRA_GROUP),
                           self.objects.list("ResourceClaim", DRA_GROUP), nodes,
                           self.objects.list("ResourceClaimTemplate", DRA_GROUP), cache=self._cluster.devices.cache)

    def _on_workload(self, kind: WatchedKind, event: EventType, obj: Mapping, before: Mapping | None) -> None:
        """A workload or PodGroup changed: cached refusals may be stale. One deleted or suspended sends no
        replacement pods; one whose spec changed may no longer declare some planned pods (scaled down)."""
        self.generation += 1
        metadata = obj.get("metadata") or {}
        key = (metadata.get("namespace") or "default", metadata.get("name"))
        gone = "was deleted" if event == "DELETED" or metadata.get("deletionTimestamp") else \
            "was suspended" if suspended(obj) else None
        if gone:
            self._drop_plans_of(kind, lambda namespace, name: (namespace, name) == key, gone)
        elif before is not None and (before.get("metadata") or {}).get("generation") != metadata.get("generation"):
            self._drop_shrunk_plans(kind, key, obj)

    def _drop_shrunk_plans(self, kind: WatchedKind, key: tuple[str, str], workload: Mapping) -> None:
        """Plans of the workload with slots it no longer declares (an elastic Job, a LeaderWorkerSet scaled
        down): their pods are deleted and not replaced, so the plan goes; the pods still running keep their
        nodes, and a gang that needs more pods later is planned again around them."""
        owned = [plan for plan in self.plans if plan.owner == (kind.group, kind.kind, *key)]
        if not owned or is_podgroup(workload):
            return
        try:
            declared = {tree.key: set(tree.slots()) for tree in group_workload(workload, self._cluster.topologies)}
        except ValueError:                      # GroupingError: the filter refuses its pods, naming the field
            return
        for plan in owned:
            if not set(plan.slots) <= declared.get(plan.key, set()):
                self.book.drop_plan(plan.key, f"its {kind.kind} {key[0]}/{key[1]} no longer declares all of its pods")

    def _drop_plans_of(self, kind: WatchedKind, gone: Callable[[str, str], bool], why: str) -> None:
        """Gangs whose workload or PodGroup of `kind` is `gone(namespace, name)` (deleted, or suspended: a
        resumed workload makes new pods, planned afresh) get no replacement pods: their reservations (held
        for replacements after a pod is deleted) go now rather than when the TTL ends."""
        self.book.drop_plans_of(lambda owner: owner[:2] == (kind.group, kind.kind) and gone(*owner[2:]),
                                lambda plan: f"its {kind.kind} {plan.owner[2]}/{plan.owner[3]} {why}")

    def synced(self) -> None:
        with self.lock:
            self.synced_once = True
            self._rebuild()
        log.info("cluster synced", extra=fields(nodes=len(self.cluster.nodes), pods=len(self.cluster.pods),
                                                 topologies=sorted(self.cluster.topologies)))

    @property
    def topologies(self) -> Mapping:
        """The topology trees of the model as last built, never rebuilt here (the webhook reads them on
        the event loop; a model gone stale differs in node membership, not in levels)."""
        return self._cluster.topologies

    @property
    def stale(self) -> bool:
        """The model waits for a rebuild (refresh() makes it; a timer calls it STALE_REBUILD_DELAY later)."""
        return self._dirty and self.synced_once

    @property
    def cluster(self) -> Cluster:
        """The cluster model as last built. A read never changes anything: node additions, deletions and
        label changes only mark the model stale, and refresh() rebuilds it (the engine calls it before each
        verb; a timer STALE_REBUILD_DELAY after the model went stale), so a node pool scaling up by hundreds
        costs one rebuild, not one per node (each of which reads every node and pod)."""
        return self._cluster

    def refresh(self) -> None:
        """Rebuild a stale model now (re-reserving every held slot; nodes lost go to on_nodes_changed)."""
        if self.stale:
            with self.lock:
                if self._dirty:
                    self._rebuild()

    @cluster.setter
    def cluster(self, cluster: Cluster) -> None:
        self._cluster = cluster

    # --- the cluster model ------------------------------------------------------------------------------
    def _topology_objects(self) -> list[Mapping]:
        return [o for kind in ("Topology", "HyperNode") for o in self.objects.list(kind)
                if (api_group(o), o.get("kind")) in TOPOLOGY_KINDS]

    def _rebuild(self) -> None:
        nodes = [NodeInfo.from_object(n) for n in self.objects.list("Node")]
        old_names = set(self._cluster.node_names)
        cluster = Cluster(nodes, self._topology_objects(), self._devices(nodes))
        self._warn_class_errors(cluster.devices.errors)
        running = [pod for pod in self.objects.list("Pod") if cluster.add_pod(pod)]
        self._cluster = cluster
        for pod in running:
            self.book.pod_running(pod)
        self.changes.reset(len(cluster.nodes))
        self._dirty = False
        self.generation += 1
        self.rebuilds += 1
        lost = self.book.reserve_again()
        gone = (old_names - set(cluster.node_names)) | lost
        self._notify_nodes(gone - {""})

    def _stale(self) -> None:
        self._dirty = True
        self.generation += 1
        if self.synced_once and self._settle is None:
            self._settle = threading.Timer(STALE_REBUILD_DELAY, self._settle_now)
            self._settle.daemon = True
            self._settle.start()

    def _settle_now(self) -> None:
        with self.lock:
            self._settle = None
            if self._dirty:
                self._rebuild()

    def _notify_nodes(self, names: set[str]) -> None:
        if names and self._on_nodes_changed is not None:
            self._on_nodes_changed(names)

    def _on_node(self, event: EventType, obj: Mapping) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        cluster = self._cluster
        if event == "DELETED" or name not in cluster.node_index or self._dirty:
            self._stale()                       # the rebuild tells on_nodes_changed about nodes gone
            return
        info = NodeInfo.from_object(obj)
        old = cluster.nodes[cluster.node_index[name]]
        if cluster.update_node_status(info):
            if _turned_better(old, info):
                self.changes.note_opened(cluster.node_index.get(name))
            self.generation += 1
        else:
            self._stale()                       # labels or allocatable changed
        if _turned_worse(old, info):
            self._notify_nodes({name})

    # --- pods -------------------------------------------------------------------------------------------
    def _keep_local_binding(self, event: EventType, pod: Mapping) -> Mapping:
        """A watch event older than a bind we made ourselves must not undo it in our view."""
        key = pod_key(pod)
        node = self._bound_locally.get(key)
        if node is None or event == "DELETED":
            self._bound_locally.pop(key, None)
            return pod
        if (pod.get("spec") or {}).get("nodeName"):
            self._bound_locally.pop(key, None)
            return pod
        return {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node}}

    def _on_pod(self, event: EventType, pod: Mapping) -> None:
        key = pod_key(pod)
        before = self._cluster.pods.get(key)
        if event == "DELETED" or not is_bound_and_running(pod):
            if before is not None:
                self.changes.note_freed(before.node)
            self._cluster.remove_pod(key)
            if event != "DELETED" and (pod.get("status") or {}).get("phase") == "Succeeded":
                self.book.pod_finished(key)
            else:
                self.book.pod_left(key)
            self.generation += 1
            self._pod_changed(key, None)
            return
        self.book.pod_bound(pod)
        if not self._dirty:
            if self._cluster.add_pod(pod):
                self.book.pod_running(pod)
            self._note_started(key, before)
            if self.book.recheck_node(pod["spec"]["nodeName"]):
                self._notify_nodes({pod["spec"]["nodeName"]})
        self.generation += 1
        self._pod_changed(key, pod)

    def _note_started(self, key: str, before) -> None:
        now = self.cluster.pods.get(key)
        if now is None or (before is not None and before.node == now.node):
            return                              # an update of a pod already running there
        if before is not None:
            self.changes.note_freed(before.node)
        namespace, name = key.split("/", 1)
        priority = ((self.objects.get("Pod", namespace, name) or {}).get("spec") or {}).get("priority")
        self.changes.note_added(now.node, priority if isinstance(priority, int) else 0)

    def _index_podgroup(self, event: EventType, pod: Mapping) -> None:
        metadata = pod.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        names = {(metadata.get("annotations") or {}).get(PODGROUP_KEYS[0]),
                 (metadata.get("labels") or {}).get(PODGROUP_KEYS[1]), scheduling_group(pod)} - {None, ""}
        name = metadata.get("name")
        for group in names:
            key = (namespace, group)
            if event != "DELETED":
                members = self.podgroup_pods.setdefault(key, {})
                before = members.get(name)
                members[name] = pod
                if before is None or podgroup_member_key(before) != podgroup_member_key(pod):
                    self._podgroup_changed(key)
                continue
            members = self.podgroup_pods.get(key, {})
            if members.pop(name, None) is not None:
                self._podgroup_changed(key)
            if not members:
                self.podgroup_pods.pop(key, None)   # the group's last pod: forget the group
                self.podgroup_versions.pop(key, None)

    def _podgroup_changed(self, key: tuple[str, str]) -> None:
        self._podgroup_counter += 1
        self.podgroup_versions[key] = self._podgroup_counter

    def record_binding(self, pod: Mapping, node: str) -> None:
        """Our own bind succeeded: account it now rather than when the watch reports it."""
        with self.lock:
            bound_pod = {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node},
                         "status": {**(pod.get("status") or {}), "phase": (pod.get("status") or {}).get("phase") or "Pending"}}
            self._bound_locally[pod_key(pod)] = node
            self.objects.apply(POD_KIND, "MODIFIED", bound_pod)
            self._index_podgroup("MODIFIED", bound_pod)          # the same copy as objects, as the watch's would be
            self._on_pod("MODIFIED", bound_pod)

    def _changed(self) -> None:
        self.generation += 1

    # --- gangs (read-only views; every change goes through `book`) ----------------------------------
    @property
    def plans(self) -> PlanStore:
        return self.book.plans

    @property
    def bound(self) -> dict[str, dict[Slot, tuple[str, str]]]:
        """gang -> slot -> (pod key, node) of the bound pods of gangs (from their placement annotations)."""
        return self.book.bound

    def drop_plan(self, key: str, why: str) -> None:
        with self.lock:
            self.book.drop_plan(key, why)

    def find_pod(self, namespace: str, name: str) -> Mapping | None:
        """The watched copy of a pod (the verbs never store a pod from a request body: see extender/trusted.py)."""
        return self.objects.get("Pod", namespace, name)

    def expire_due(self) -> None:
        """expire(), at most every EXPIRY_SCAN_INTERVAL: every filter calls it, and it reads every plan
        (31 µs a call with 2,000 plans); a TTL of minutes loses nothing to a second's delay."""
        now = self.clock()
        if now >= self._next_expiry_scan:
            self._next_expiry_scan = now + EXPIRY_SCAN_INTERVAL
            self.expire(now)

    def expire(self, now: float | None = None) -> list[str]:
        """Drop plans whose reservations outlived the TTL without every pod arriving."""
        now = self.clock() if now is None else now
        with self.lock:
            expired = self.book.expire(now)
            if expired:
                self.metrics.expired.inc(len(expired))
            return [p.key for p in expired]


def _turned_better(old: NodeInfo, new: NodeInfo) -> bool:
    """A node that may take pods it did not before: Ready, uncordoned, or a taint gone."""
    return (new.ready and not old.ready) or (old.unschedulable and not new.unschedulable) \
        or any(taint not in new.taints for taint in old.taints)


def _turned_worse(old: NodeInfo, new: NodeInfo) -> bool:
    """A node that may no longer take the pods planned on it: NotReady, cordoned, or its taints changed.

    GPU nodes carry a taint all the time, so "usable" cannot mean "untainted" here."""
    return (old.ready and not new.ready) or (new.unschedulable and not old.unschedulable) \
        or old.taints != new.taints
