"""The fake API server's state: installed resources, objects, a global resourceVersion and the event history.

Tests seed and change objects through `FakeKube`; the HTTP layer (server.py) calls the same methods.
Every write bumps one monotonic resourceVersion and appends a watch event to the history, as etcd does.
"""
from __future__ import annotations

import copy
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone


class ApiError(Exception):
    """A failure answered as a metav1.Status with this code and reason."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict:
        return status_body(self.code, self.reason, self.message, self.details)


def status_body(code: int, reason: str = "", message: str = "", details: dict | None = None) -> dict:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Success" if code < 400 else "Failure", "code": code}
    if reason:
        body["reason"] = reason
    if message:
        body["message"] = message
    if details is not None:
        body["details"] = details
    return body


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    builtin: bool = False      # built-in list items carry no apiVersion/kind, as the real server serves them

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


BUILTIN = (
    Resource("", "v1", "nodes", "Node", False, True),
    Resource("", "v1", "pods", "Pod", True, True),
    Resource("", "v1", "events", "Event", True, True),
    Resource("", "v1", "namespaces", "Namespace", False, True),
    Resource("events.k8s.io", "v1", "events", "Event", True, True),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True, True),
    Resource("batch", "v1", "jobs", "Job", True, True),
    Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, True),
)


@dataclass
class WatchEvent:
    rv: int
    resource: Resource
    type: str
    obj: dict


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: dict, patch: dict) -> dict:
    """RFC 7386 JSON merge patch (also what strategic merge does for metadata.annotations and labels)."""
    result = dict(target)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge_patch(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


class FakeKube:
    """In-memory API state. Thread-safe; every read returns copies."""

    def __init__(self) -> None:
        self.url = ""                                     # set by serve() once the server listens
        self.changed = threading.Condition()
        self.expired_epoch = 0                            # bumped to end every open watch with a 410
        self.closed = False
        self.reset()

    def reset(self) -> None:
        """Back to a fresh cluster with only the built-in resources (the server keeps running)."""
        with self.changed:
            self._rv = 0
            self._resources: dict[tuple[str, str, str], Resource] = {}
            self._objects: dict[Resource, dict[tuple[str, str], dict]] = {}
            self._history: list[WatchEvent] = []
            self._compacted_rv = 0                        # watches from below this answer 410 Gone
            self.expired_epoch += 1
            self.refuse_eviction: set[tuple[str, str]] = set()   # (namespace, name) a "PDB" protects
            self.requests: list[tuple[str, str]] = []     # (method, path) of every HTTP request served
            self.authorizations: set[str] = set()         # Authorization headers seen
            self._faults: list[list] = []                 # [method, path, code, remaining]
            for resource in BUILTIN:
                self.install(resource)

    # ---- resources ("CRDs")
    def install(self, resource: Resource) -> Resource:
        with self.changed:
            self._resources[(resource.group, resource.version, resource.plural)] = resource
            self._objects.setdefault(resource, {})
        return resource

    def install_crd(self, group: str, version: str, plural: str, kind: str, namespaced: bool = True) -> Resource:
        return self.install(Resource(group, version, plural, kind, namespaced))

    def uninstall(self, group: str, version: str, plural: str) -> None:
        with self.changed:
            self._objects.pop(self._resources.pop((group, version, plural)), None)

    def resource(self, group: str, version: str, plural: str) -> Resource | None:
        return self._resources.get((group, version, plural))

    def serves_group_version(self, group: str, version: str) -> bool:
        return any(g == group and v == version for g, v, _ in self._resources)

    def resource_for(self, api_version: str, kind: str) -> Resource:
        group, _, version = api_version.rpartition("/")
        for resource in self._resources.values():
            if resource.group == group and resource.version == version and resource.kind == kind:
                return resource
        raise KeyError(f"no installed resource for apiVersion {api_version!r} kind {kind!r}")

    # ---- reads
    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def compacted_resource_version(self) -> int:
        return self._compacted_rv

    def list(self, resource: Resource, namespace: str | None = None) -> tuple[int, list[dict]]:
        with self.changed:
            items = [copy.deepcopy(o) for (ns, _), o in sorted(self._objects[resource].items())
                     if namespace is None or ns == namespace]
            return self._rv, items

    def read(self, resource: Resource, namespace: str | None, name: str) -> dict:
        with self.changed:
            found = self._objects.get(resource, {}).get((namespace or "", name))
            if found is None:
                raise not_found(resource, name)
            return copy.deepcopy(found)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        try:
            return self.read(self.resource_for(api_version, kind), namespace, name)
        except ApiError:
            return None

    def events_since(self, resource: Resource, namespace: str | None, rv: int) -> list[WatchEvent]:
        """Events of one resource after `rv`; raises ApiError 410 when `rv` is older than the history kept."""
        with self.changed:
            if rv < self._compacted_rv:
                raise ApiError(410, "Expired", f"too old resource version: {rv} ({self._compacted_rv})")
            return [e for e in self._history
                    if e.rv > rv and e.resource == resource
                    and (namespace is None or e.obj["metadata"].get("namespace") == namespace)]

    # ---- writes (each one is a watch event)
    def create(self, obj: dict, resource: Resource | None = None) -> dict:
        resource = resource or self.resource_for(obj["apiVersion"], obj["kind"])
        obj = copy.deepcopy(obj)
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        metadata = obj.setdefault("metadata", {})
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = metadata["generateName"] + uuid.uuid4().hex[:5]
        if not metadata.get("name"):
            raise ApiError(422, "Invalid", f"{resource.kind}: metadata.name: Required value: "
                                           "name or generateName is required")
        if resource.namespaced:
            metadata.setdefault("namespace", "default")
        else:
            metadata.pop("namespace", None)
        with self.changed:
            key = (metadata.get("namespace", ""), metadata["name"])
            if key in self._objects[resource]:
                raise ApiError(409, "AlreadyExists", f'{resource.qualified()} "{metadata["name"]}" already exists',
                               {"name": metadata["name"], "kind": resource.plural})
            metadata.setdefault("uid", str(uuid.uuid4()))
            metadata.setdefault("creationTimestamp", now_rfc3339())
            return self._commit(resource, "ADDED", obj)

    def replace(self, obj: dict, resource: Resource | None = None) -> dict:
        """PUT semantics: a resourceVersion in the object must match the stored one (optimistic concurrency)."""
        resource = resource or self.resource_for(obj["apiVersion"], obj["kind"])
        obj = copy.deepcopy(obj)
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        metadata = obj.setdefault("metadata", {})
        with self.changed:
            current = self._stored(resource, metadata.get("namespace"), metadata.get("name", ""))
            expected = metadata.get("resourceVersion")
            if expected and expected != current["metadata"]["resourceVersion"]:
                raise conflict(resource, metadata["name"], "the object has been modified; please apply your "
                                                           "changes to the latest version and try again")
            for field in ("uid", "creationTimestamp", "namespace"):
                if field in current["metadata"]:
                    metadata[field] = current["metadata"][field]
            return self._commit(resource, "MODIFIED", obj)

    def patch(self, resource: Resource, namespace: str | None, name: str, patch: dict) -> dict:
        with self.changed:
            current = self._stored(resource, namespace, name)
            patched = merge_patch(current, patch)
            patched["metadata"] = {**patched.get("metadata", {}),
                                   **{k: current["metadata"][k] for k in ("name", "uid") if k in current["metadata"]}}
            return self._commit(resource, "MODIFIED", patched)

    def delete(self, resource: Resource, namespace: str | None, name: str) -> dict:
        with self.changed:
            current = self._stored(resource, namespace, name)
            return self._commit(resource, "DELETED", copy.deepcopy(current))

    def remove(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict:
        return self.delete(self.resource_for(api_version, kind), namespace, name)

    def update(self, api_version: str, kind: str, name: str, patch: dict, namespace: str | None = None) -> dict:
        return self.patch(self.resource_for(api_version, kind), namespace, name, patch)

    # ---- pod subresources
    def bind(self, namespace: str, name: str, binding: dict) -> None:
        pods = self.resource("", "v1", "pods")
        target = (binding.get("target") or {}).get("name")
        if not target:
            raise ApiError(422, "Invalid", 'Binding.core "{}" is invalid: target.name: Required value'.format(name))
        if (binding.get("metadata") or {}).get("name", name) != name:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Binding object")
        with self.changed:
            pod = self._stored(pods, namespace, name)
            uid = (binding.get("metadata") or {}).get("uid")
            if uid and uid != pod["metadata"]["uid"]:
                raise conflict(pods, name, f"Precondition failed: UID in precondition: {uid}, "
                                           f"UID in object meta: {pod['metadata']['uid']}", on="pods/binding")
            if pod["metadata"].get("deletionTimestamp"):
                raise conflict(pods, name, f"pod {name} is being deleted, cannot be assigned to a host",
                               on="pods/binding")
            if pod.get("spec", {}).get("nodeName"):
                raise conflict(pods, name, f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"',
                               on="pods/binding")
            bound = copy.deepcopy(pod)
            bound.setdefault("spec", {})["nodeName"] = target
            annotations = (binding.get("metadata") or {}).get("annotations")
            if annotations:
                bound["metadata"].setdefault("annotations", {}).update(annotations)
            conditions = [c for c in bound.setdefault("status", {}).get("conditions", [])
                          if c.get("type") != "PodScheduled"]
            bound["status"]["conditions"] = conditions + [{"type": "PodScheduled", "status": "True",
                                                           "lastTransitionTime": now_rfc3339()}]
            self._commit(pods, "MODIFIED", bound)

    def evict(self, namespace: str, name: str, eviction: dict) -> None:
        pods = self.resource("", "v1", "pods")
        with self.changed:
            pod = self._stored(pods, namespace, name)
            uid = ((eviction.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
            if uid and uid != pod["metadata"]["uid"]:
                raise conflict(pods, name, f"Precondition failed: UID in precondition: {uid}, "
                                           f"UID in object meta: {pod['metadata']['uid']}")
            if (namespace, name) in self.refuse_eviction:
                raise ApiError(429, "TooManyRequests",
                               "Cannot evict pod as it would violate the pod's disruption budget.",
                               {"causes": [{"reason": "DisruptionBudget",
                                            "message": "The disruption budget fake-pdb needs 1 healthy pods "
                                                       "and has 1 currently"}]})
            self._commit(pods, "DELETED", copy.deepcopy(pod))

    # ---- failure injection
    def compact(self) -> None:
        """Forget the history (as etcd compaction does) and end every open watch with a 410 Gone."""
        with self.changed:
            self._history.clear()
            self._compacted_rv = self._rv
            self.expired_epoch += 1
            self.changed.notify_all()

    def fail(self, method: str, path: str, times: int = 1, code: int = 500) -> None:
        """The next `times` requests with this method and exact path answer `code` (an InternalError by default)."""
        with self.changed:
            self._faults.append([method, path, code, times])

    def take_fault(self, method: str, path: str) -> int | None:
        with self.changed:
            for fault in self._faults:
                if fault[0] == method and fault[1] == path and fault[3] > 0:
                    fault[3] -= 1
                    return fault[2]
        return None

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify_all()

    # ---- internals
    def _stored(self, resource: Resource, namespace: str | None, name: str) -> dict:
        found = self._objects.get(resource, {}).get((namespace or "", name))
        if found is None:
            raise not_found(resource, name)
        return found

    def _commit(self, resource: Resource, event: str, obj: dict) -> dict:
        self._rv += 1
        metadata = obj["metadata"]
        metadata["resourceVersion"] = str(self._rv)
        key = (metadata.get("namespace", ""), metadata["name"])
        if event == "DELETED":
            self._objects[resource].pop(key, None)
        else:
            self._objects[resource][key] = obj
        self._history.append(WatchEvent(self._rv, resource, event, copy.deepcopy(obj)))
        self.changed.notify_all()
        return copy.deepcopy(obj)


def not_found(resource: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource.qualified()} "{name}" not found',
                    {"name": name, "group": resource.group, "kind": resource.plural})


def conflict(resource: Resource, name: str, why: str, on: str | None = None) -> ApiError:
    what = on or resource.qualified()
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {what} "{name}": {why}',
                    {"name": name, "group": resource.group, "kind": on or resource.plural})
