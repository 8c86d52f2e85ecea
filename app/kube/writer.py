"""KubeWriter: the ClusterWriter port on the API server (Binding, annotation patch, Eviction, Events).

Requests go through KubeApi as plain JSON: the generated `V1Binding` model cannot even read the Status the
server answers to a Binding, and dicts are what the rest of the service handles.
"""
from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime, timezone

from ..ports import BindConflict, EvictionRefused, gate_index
from .client import KubeApi, KubeApiError

log = logging.getLogger(__name__)

COMPONENT = "tas-extender"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
EVENT_MESSAGE_LIMIT = 1024                  # what events.k8s.io accepts for a note; core/v1 is not stricter
EVENT_SERIES_SECONDS = 600.0                # repeats within this window bump one Event's count
EVENT_SERIES_MAX = 4096
_ALREADY_BOUND = re.compile(r'already assigned to node "([^"]+)"')


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pods(namespace: str, name: str, subresource: str = "") -> str:
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    return f"{path}/{subresource}" if subresource else path


class KubeWriter:
    """Writes the service's decisions to the cluster. Thread-safe."""

    def __init__(self, api: KubeApi, component: str = COMPONENT, instance: str | None = None):
        self.api = api
        self.component = component
        self.instance = instance or socket.gethostname()
        self._series: OrderedDict[tuple, tuple[str, str, int, float]] = OrderedDict()
        self._series_lock = threading.Lock()

    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": name, "namespace": namespace, "uid": uid,
                                **({"annotations": dict(annotations)} if annotations else {})},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            self.api.request("POST", _pods(namespace, name, "binding"), body=binding)
        except KubeApiError as error:
            if error.status == 409:       # already bound, being deleted, or a new pod under that name
                bound_to = _ALREADY_BOUND.search(error.message)
                raise BindConflict(error.message, bound_to.group(1) if bound_to else None) from error
            raise

    def create_podgroup(self, namespace: str, body: Mapping) -> None:
        """Create a native PodGroup; one that exists already (409) is fine."""
        version = str(body.get("apiVersion") or "").split("/", 1)[-1]
        try:
            self.api.request("POST", f"/apis/scheduling.k8s.io/{version}/namespaces/{namespace}/podgroups", body=dict(body))
        except KubeApiError as error:
            if error.status != 409:
                raise

    def ungate_pod(self, namespace: str, name: str, gate: str, scheduler_names) -> bool:
        """GET the pod, then remove `gate` by its index with a `test` of that entry first: a pod whose gates
        moved meanwhile fails the test (422) and is read again."""
        for _ in range(3):
            try:
                pod = self.api.request("GET", _pods(namespace, name))
                index = gate_index(pod, gate, scheduler_names)
                if index is None:
                    return False
                path = f"/spec/schedulingGates/{index}"
                self.api.request("PATCH", _pods(namespace, name), content_type=JSON_PATCH, body=[
                    {"op": "test", "path": path, "value": {"name": gate}}, {"op": "remove", "path": path}])
                return True
            except KubeApiError as error:
                if error.status == 404:
                    return False
                if error.status not in (409, 422):
                    raise
        return False

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        self.api.request("PATCH", _pods(namespace, name), body={"metadata": {"annotations": dict(annotations)}},
                         content_type=MERGE_PATCH)

    def evict(self, namespace: str, name: str, uid: str | None = None) -> None:
        """policy/v1 Eviction. A pod already gone (404, or 409: the name now holds another pod) counts as evicted."""
        eviction: dict = {"apiVersion": "policy/v1", "kind": "Eviction",
                          "metadata": {"name": name, "namespace": namespace}}
        if uid:
            eviction["deleteOptions"] = {"preconditions": {"uid": uid}}
        try:
            self.api.request("POST", _pods(namespace, name, "eviction"), body=eviction)
        except KubeApiError as error:
            if error.status == 429:
                causes = "; ".join(c.get("message", "") for c in error.causes if c.get("message"))
                raise EvictionRefused(f"{namespace}/{name}: {error.message}" + (f" ({causes})" if causes else "")) \
                    from error
            if error.status in (404, 409):
                log.info("eviction of %s/%s: pod already gone (%s)", namespace, name, error.message)
                return
            raise

    def event(self, involved: Mapping, reason: str, message: str, type_: str = "Normal") -> None:
        """A core/v1 Event on `involved`; repeats within ten minutes bump the same Event's count. Never raises."""
        try:
            self._record(involved, reason, message[:EVENT_MESSAGE_LIMIT], type_)
        except Exception as error:  # noqa: BLE001 - events are best effort
            log.warning("could not record event %s on %s: %s", reason, _describe(involved), error)

    def _record(self, involved: Mapping, reason: str, message: str, type_: str) -> None:
        metadata = involved.get("metadata") or {}
        if not metadata.get("name"):
            raise ValueError("the involved object has no metadata.name")
        reference = {"apiVersion": involved.get("apiVersion") or "v1", "kind": involved.get("kind") or "Pod",
                     "name": metadata.get("name", ""), "namespace": metadata.get("namespace") or None,
                     "uid": metadata.get("uid") or None}
        reference = {k: v for k, v in reference.items() if v}
        namespace = metadata.get("namespace") or "default"     # cluster-scoped objects: events go to default
        key = (reference.get("uid") or reference.get("kind"), reference.get("name"), reason, message, type_)
        now, timestamp = time.monotonic(), _now()
        with self._series_lock:
            previous = self._series.get(key)
        if previous and now - previous[3] < EVENT_SERIES_SECONDS:
            event_namespace, event_name, count, _ = previous
            try:
                self.api.request("PATCH", f"/api/v1/namespaces/{event_namespace}/events/{event_name}",
                                 body={"count": count + 1, "lastTimestamp": timestamp}, content_type=MERGE_PATCH)
                self._remember(key, (event_namespace, event_name, count + 1, now))
                return
            except KubeApiError as error:
                if error.status != 404:
                    raise
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{reference['name']}.", "namespace": namespace},
                "involvedObject": reference, "reason": reason, "message": message, "type": type_,
                "source": {"component": self.component}, "reportingComponent": self.component,
                "reportingInstance": self.instance, "firstTimestamp": timestamp, "lastTimestamp": timestamp,
                "count": 1}
        created = self.api.request("POST", f"/api/v1/namespaces/{namespace}/events", body=body)
        self._remember(key, (namespace, created["metadata"]["name"], 1, now))

    def _remember(self, key: tuple, value: tuple[str, str, int, float]) -> None:
        with self._series_lock:
            self._series[key] = value
            self._series.move_to_end(key)
            while len(self._series) > EVENT_SERIES_MAX:
                self._series.popitem(last=False)


def _describe(obj: Mapping) -> str:
    metadata = obj.get("metadata") or {}
    where = "/".join(part for part in (metadata.get("namespace"), metadata.get("name")) if part)
    return f"{obj.get('kind') or 'object'} {where or '(unnamed)'}"
