"""Standalone mode: a cluster held in memory (the built-in demo or a `kubectl get -o yaml` dump) that
binds by updating the service's own state, so every endpoint works without Kubernetes."""
from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Iterable, Mapping

from topology.objects import ClusterObjects

from .logs import fields, get_logger
from .ports import BindConflict, EvictionRefused, WatchedKind, gate_index
from .state import POD_KIND, ServiceState, kind_of

log = get_logger(__name__)


def load_into(state: ServiceState, objects: ClusterObjects | Iterable[Mapping]) -> None:
    """Feed every object as the first full sync of a source would, then mark the state synced."""
    if isinstance(objects, ClusterObjects):
        objects = objects.nodes + objects.pods + objects.topologies + objects.devices + objects.other
    by_kind: dict[WatchedKind, list[Mapping]] = {}
    for obj in objects:
        by_kind.setdefault(kind_of(obj), []).append(obj)
    for kind, items in by_kind.items():
        state.replace(kind, items)
    state.synced()


class MemoryWriter:
    """ClusterWriter over the in-memory cluster: bind sets spec.nodeName (409 semantics included),
    annotations merge, eviction deletes the pod, events go to the log and a short list. Every write
    holds the state lock: it reads and changes the state's pods as one step (binds and evictions may come
    from the threadpool and the preemption thread at once)."""

    blocking = False          # no I/O: the extender calls it on the event loop

    def __init__(self, state: ServiceState):
        self.state = state
        self.events: list[dict] = []
        self._lock = state.lock
        self._resource_version = itertools.count(1)

    def _pod(self, namespace: str, name: str) -> Mapping:
        pod = self.state.find_pod(namespace, name)
        if pod is None:
            raise LookupError(f"pod {namespace}/{name} is unknown to the standalone cluster "
                              f"(add it with POST /debug/objects first)")
        return pod

    def create_podgroup(self, namespace: str, body: Mapping) -> None:
        from .state import kind_of
        with self._lock:
            if self.state.objects.get("PodGroup", namespace, body["metadata"]["name"], group="scheduling.k8s.io") is None:
                self.state.apply(kind_of(body), "ADDED", {**body, "metadata": {**body["metadata"], "namespace": namespace}})

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        with self._lock:
            pod = self._pod(namespace, name)
            metadata = dict(pod.get("metadata") or {})
            metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
            self._store({**pod, "metadata": metadata})

    def ungate_pod(self, namespace: str, name: str, gate: str, scheduler_names) -> bool:
        with self._lock:
            pod = self.state.find_pod(namespace, name)
            index = None if pod is None else gate_index(pod, gate, scheduler_names)
            if index is None:
                return False
            spec = dict(pod.get("spec") or {})
            spec["schedulingGates"] = [g for i, g in enumerate(spec["schedulingGates"]) if i != index]
            self._store({**pod, "spec": spec})
            return True

    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        with self._lock:
            pod = self._pod(namespace, name)
            metadata = pod.get("metadata") or {}
            if uid and metadata.get("uid") and metadata["uid"] != uid:
                raise LookupError(f"pod {namespace}/{name} has UID {metadata['uid']}, not {uid} (precondition failed)")
            current = (pod.get("spec") or {}).get("nodeName")
            if current:
                raise BindConflict(f"pod {namespace}/{name} is already assigned to node {current}", node=current)
            if node not in self.state.cluster.node_index:
                raise LookupError(f"node {node} does not exist in the standalone cluster")
            metadata = {**metadata, "annotations": {**(metadata.get("annotations") or {}), **(annotations or {})}}
            self._store({**pod, "metadata": metadata, "spec": {**(pod.get("spec") or {}), "nodeName": node},
                         "status": {**(pod.get("status") or {}), "phase": "Running"}})

    def evict(self, namespace: str, name: str, uid: str | None = None) -> None:
        with self._lock:
            pod = self._pod(namespace, name)
            if uid and (pod.get("metadata") or {}).get("uid") not in (None, uid):
                raise EvictionRefused(f"pod {namespace}/{name} has another UID")
            self.state.apply(POD_KIND, "DELETED", pod)

    def event(self, involved: Mapping, reason: str, message: str, type_: str = "Normal") -> None:
        metadata = involved.get("metadata") or {}
        record = {"object": f"{metadata.get('namespace')}/{metadata.get('name')}", "reason": reason,
                  "message": message, "type": type_}
        with self._lock:
            self.events = (self.events + [record])[-200:]
        log.info("event", extra=fields(pod=record["object"], reason=reason, text=message))

    def _store(self, pod: Mapping) -> None:
        metadata = {**(pod.get("metadata") or {}), "resourceVersion": f"mem-{next(self._resource_version)}"}
        pod = {**pod, "metadata": metadata}
        self.state.apply(POD_KIND, "MODIFIED", pod)


def place_demo_gangs(engine, running: Iterable[Mapping], refused: Mapping) -> None:
    """`serve --demo-size N`: every pod of each running gang through filter and bind, as kube-scheduler
    would send them, then the first pod of the gang that does not fit, so that the page shows a fleet with
    bound gangs and one refusal."""
    from grouper import expand_pods

    state = engine.state               # `engine`: the GangScheduler (app.scheduling) that owns it
    names = list(state.cluster.node_names)
    bound = 0

    def created(pod: dict) -> dict:
        """The pod as the watch brings it once its controller created it (the verbs decide from that copy)."""
        pod["spec"].setdefault("schedulerName", state.settings.scheduler_names[0])
        state.apply(POD_KIND, "ADDED", pod)
        return pod

    with _engine_quiet():               # one summary line, not one per pod and gang (8,393 at 16,384 nodes)
        for workload in running:
            for pod in map(created, expand_pods(workload)):
                outcome = engine.filter(pod, names)
                if not outcome.nodes:
                    break                   # the fleet is full: leave this gang waiting too
                meta = pod["metadata"]
                if not engine.bind(meta["namespace"], meta["name"], meta.get("uid") or "", outcome.nodes[0]):
                    bound += 1
        engine.filter(created(expand_pods(refused)[0]), names)
    log.info("demo gangs placed", extra=fields(gangs=len(list(state.plans)), pods_bound=bound))


@contextlib.contextmanager
def _engine_quiet():
    """The engine's info lines (bound, gang planned) held back while the demo places its fleet; warnings
    still show, and --log-level debug shows everything."""
    engine_log = logging.getLogger("app.scheduling")
    before = engine_log.level
    if not engine_log.isEnabledFor(logging.DEBUG):
        engine_log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        engine_log.setLevel(before)

