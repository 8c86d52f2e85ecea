"""List and watch every watched kind into an ObjectSink, the way client-go's reflector does.

Per resource (one background thread each):
  1. list, page by page, and hand the full set to `sink.replace`;
  2. watch from the list's resourceVersion and hand each event to `sink.apply` (bookmarks advance the version);
  3. a 410 Gone (expired version, as a watch ERROR event or an HTTP status) relists; other failures retry
     the watch from the last version seen, after an exponential backoff with jitter;
  4. a resource the server does not serve (404: its CRD is not installed, resource.k8s.io switched off) is
     skipped and re-checked every `absent_recheck` seconds; once every resource of its API group has been
     tried, one log line names those of the group that are not served (one line for resource.k8s.io's four).
Versions of one resource (Kueue's Topology v1beta2 and v1beta1) are alternatives: the first one served wins.
`sink.synced()` is called once, when every resource has been listed (or found absent) once.
"""
from __future__ import annotations

import ctypes
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..ports import WATCHED_KINDS, ObjectSink, WatchedKind
from .client import KubeApi, KubeApiError, resource_path

log = logging.getLogger(__name__)

WATCH_EVENTS = ("ADDED", "MODIFIED", "DELETED")


class Gone(Exception):
    """410: the resourceVersion we hold is no longer served; relist."""


class NotServed(Exception):
    """404 on the collection: the API (usually a CRD) is not installed."""


class Backoff:
    """Exponential delays with jitter: initial, initial*factor, ... up to cap."""

    def __init__(self, initial: float = 0.5, cap: float = 30.0, factor: float = 2.0, jitter: float = 0.2):
        self.initial, self.cap, self.factor, self.jitter = initial, cap, factor, jitter
        self._next = initial

    def next(self) -> float:
        delay = min(self.cap, self._next * (1 + random.uniform(0, self.jitter)))
        self._next = min(self.cap, self._next * self.factor)
        return delay

    def reset(self) -> None:
        self._next = self.initial


@dataclass
class ResourceStatus:
    """What one resource's thread is doing (for logs and debug endpoints)."""
    name: str
    state: str = "starting"          # listing | watching | absent | backoff | stopped
    served_version: str | None = None
    resource_version: str | None = None
    lists: int = 0
    relists_on_gone: int = 0
    errors: int = 0
    last_error: str | None = None
    events: int = 0


def _families(kinds: Iterable[WatchedKind]) -> dict[str, list[WatchedKind]]:
    """Kinds grouped by resource (plural.group), versions kept in the given order of preference."""
    families: dict[str, list[WatchedKind]] = {}
    for kind in kinds:
        families.setdefault(f"{kind.plural}.{kind.group}" if kind.group else kind.plural, []).append(kind)
    return families


def _groups(families: Mapping[str, list[WatchedKind]]) -> dict[str, set[str]]:
    """The resource names (plural.group) of each API group."""
    groups: dict[str, set[str]] = {}
    for name, versions in families.items():
        groups.setdefault(versions[0].group, set()).add(name)
    return groups


def _name_os_thread(name: str) -> None:
    """Give the calling thread its name in the OS too (`top -H`, /proc/<pid>/task/<tid>/comm; Linux keeps 15
    bytes), so a thread's CPU can be told apart from outside the process. Nothing happens elsewhere."""
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)    # PR_SET_NAME
    except (OSError, AttributeError, TypeError):
        pass


def _complete(kind: WatchedKind, obj: dict) -> dict:
    """Built-in list items come without apiVersion/kind; managedFields are large and never read."""
    obj.setdefault("apiVersion", kind.api_version)
    obj.setdefault("kind", kind.kind)
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


class KubeSource:
    """Keeps an ObjectSink in step with the API server. `start()` once, `stop()` to end every thread."""

    def __init__(self, api: KubeApi, sink: ObjectSink, kinds: Iterable[WatchedKind] = WATCHED_KINDS, *,
                 page_size: int = 500, watch_timeout: float = 300.0, absent_recheck: float = 300.0,
                 backoff_initial: float = 0.5, backoff_cap: float = 30.0):
        self.api, self.sink = api, sink
        self.page_size, self.watch_timeout, self.absent_recheck = page_size, watch_timeout, absent_recheck
        self._backoff = (backoff_initial, backoff_cap)
        self._families = _families(kinds)
        self._status = {name: ResourceStatus(name) for name in self._families}
        self._unlisted = set(self._families)
        self._sync_announced = False      # claimed by the thread that tells the sink
        self._synced = False              # true once the sink has been told
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._failures_logged: dict[str, float] = {}     # failure text -> when it was last logged
        self._untried = {group: set(names) for group, names in _groups(self._families).items()}
        self._absent: dict[str, tuple[set, set]] = {}    # API group -> (plurals, versions tried) not served

    # ---- lifecycle
    def start(self) -> None:
        if self._threads:
            raise RuntimeError("KubeSource already started")
        for name, versions in self._families.items():
            thread = threading.Thread(target=self._run, args=(name, versions), name=f"kube-sync {name}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            while thread.is_alive() and time.monotonic() < deadline:
                self.api.close_streams()          # unblocks a watch waiting for its next event
                thread.join(0.05)

    @property
    def synced(self) -> bool:
        return self._synced

    def status(self) -> dict[str, ResourceStatus]:
        return dict(self._status)

    # ---- one resource
    def _run(self, name: str, versions: list[WatchedKind]) -> None:
        _name_os_thread(f"sync {name}")
        status = self._status[name]
        backoff = Backoff(*self._backoff)
        kind: WatchedKind | None = None
        version: str | None = None         # None: (re)list before watching
        while not self._stop.is_set():
            try:
                if version is None:
                    kind, version = self._list_served(name, versions, status)
                    backoff.reset()
                    if kind is None:
                        self._stop.wait(self.absent_recheck)
                        continue
                started, delivered = time.monotonic(), status.events
                version = self._watch(kind, version, status)
                if status.events == delivered and time.monotonic() - started < 1.0:
                    self._stop.wait(backoff.next())     # a watch that closes at once: do not spin
                else:
                    backoff.reset()
            except Gone as gone:
                status.relists_on_gone += 1
                log.info("%s: resourceVersion %s expired (%s), relisting", name, version, gone)
                if version is None:                     # the list itself was refused: do not spin
                    self._stop.wait(backoff.next())
                version = None
            except NotServed:
                log.warning("%s: %s is no longer served, dropping its objects", name, kind.api_version)
                self._feed(self.sink.replace, kind, [])
                kind, version = None, None
            except Exception as error:          # noqa: BLE001 - a sync thread must outlive any failure
                if self._stop.is_set():
                    break
                delay = backoff.next()
                status.state, status.errors, status.last_error = "backoff", status.errors + 1, str(error)
                self._log_failure(name, error, delay)
                self._stop.wait(delay)
        status.state = "stopped"

    def _log_failure(self, name: str, error: Exception, delay: float) -> None:
        """One warning per backoff step for a failure every resource shares (the API server is down),
        not one per resource and retry: the same text is logged again only after `delay`."""
        # a transport failure (status 0: refused, timed out, TLS) is one failure of the API server, whatever
        # the resource; an HTTP error (403 on one resource) stays per resource
        text = "unreachable" if getattr(error, "status", None) == 0 else str(error)
        now = time.monotonic()
        with self._lock:
            last = self._failures_logged.get(text)
            if last is not None and now - last < delay:
                log.debug("%s: %s; retrying in %.1fs", name, error, delay)
                return
            self._failures_logged[text] = now
            if len(self._failures_logged) > 256:
                self._failures_logged.clear()
        log.warning("%s: %s; retrying in %.1fs", name, error, delay)

    def _list_served(self, name: str, versions: list[WatchedKind],
                     status: ResourceStatus) -> tuple[WatchedKind | None, str | None]:
        """List the first served version; (None, None) when none is served."""
        was_absent = status.state == "absent"
        for kind in versions:
            try:
                version = self._list(kind, status)
            except NotServed:
                continue
            if was_absent:
                log.info("%s: %s is now served", name, kind.api_version)
            else:
                self._first_try(name, versions, served=True)
            status.served_version = kind.api_version
            self._mark_listed(name)
            return kind, version
        if not was_absent:
            self._first_try(name, versions, served=False)
        status.state, status.served_version = "absent", None
        self._mark_listed(name)
        return None, None

    def _first_try(self, name: str, versions: list[WatchedKind], served: bool) -> None:
        """Once every resource of an API group has been tried, one log line names those not served."""
        group = versions[0].group
        with self._lock:
            untried = self._untried[group]
            if name not in untried:
                return
            untried.discard(name)
            if not served:
                plurals, tried = self._absent.setdefault(group, (set(), set()))
                plurals.add(versions[0].plural)
                tried.update(k.api_version for k in versions)
            plurals, tried = self._absent.get(group, (set(), set())) if not untried else (set(), set())
        if plurals:
            log.info("%s: %s not served by this cluster (%s not installed?); skipped, re-checking every %gs",
                     group or "core", ", ".join(sorted(plurals)), " / ".join(sorted(tried)), self.absent_recheck)

    def _list(self, kind: WatchedKind, status: ResourceStatus) -> str:
        status.state = "listing"
        items: list[dict] = []
        version, token = None, None
        while True:
            query: list[tuple[str, str]] = [("limit", str(self.page_size))]
            if token:
                query.append(("continue", token))
            try:
                page = self.api.request("GET", resource_path(kind), query=query)
            except KubeApiError as error:
                raise self._classify(error) from error
            metadata = page.get("metadata") or {}
            version = version or metadata.get("resourceVersion")
            items.extend(_complete(kind, item) for item in page.get("items") or [])
            token = metadata.get("continue")
            if not token or self._stop.is_set():
                break
        if not version:
            raise KubeApiError(0, "InvalidList", f"list of {kind.plural} carries no metadata.resourceVersion")
        self._feed(self.sink.replace, kind, items)
        status.lists += 1
        status.resource_version = version
        return version

    def _watch(self, kind: WatchedKind, version: str, status: ResourceStatus) -> str:
        """Apply watch events until the server ends the stream; returns the last resourceVersion seen."""
        status.state = "watching"
        timeout = int(self.watch_timeout * random.uniform(1.0, 2.0))    # spread reconnects, as client-go does
        query = [("watch", "1"), ("resourceVersion", version), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(max(1, timeout)))]
        try:
            for event in self.api.stream(resource_path(kind), query, read_timeout=timeout + 30):
                if self._stop.is_set():
                    break
                version = self._on_event(kind, event) or version
                status.resource_version = version
        except KubeApiError as error:
            raise self._classify(error) from error
        return version

    def _on_event(self, kind: WatchedKind, event: Mapping) -> str | None:
        type_, obj = event.get("type"), event.get("object") or {}
        if type_ == "ERROR":
            raise self._classify(KubeApiError(int(obj.get("code") or 0), obj.get("reason") or "",
                                              obj.get("message") or "watch error", obj))
        if type_ in WATCH_EVENTS:
            self._status_of(kind).events += 1
            self._feed(self.sink.apply, kind, type_, _complete(kind, obj))
        return (obj.get("metadata") or {}).get("resourceVersion")

    # ---- helpers
    @staticmethod
    def _classify(error: KubeApiError) -> Exception:
        if error.status == 410:
            return Gone(error.message)
        if error.status == 404:
            return NotServed(error.message)
        return error

    def _status_of(self, kind: WatchedKind) -> ResourceStatus:
        return self._status[f"{kind.plural}.{kind.group}" if kind.group else kind.plural]

    def _feed(self, call: Callable, *args) -> None:
        """A failing sink is logged, never allowed to stop the sync."""
        try:
            call(*args)
        except Exception:  # noqa: BLE001
            what = args[0].plural if args else ""
            log.exception("object sink failed in %s(%s)", getattr(call, "__name__", call), what)

    def _mark_listed(self, name: str) -> None:
        with self._lock:
            self._unlisted.discard(name)
            first = not self._unlisted and not self._sync_announced
            if first:
                self._sync_announced = True
        if first:
            log.info("initial sync complete: %s", ", ".join(
                f"{s.name}={s.served_version or 'absent'}" for s in self._status.values()))
            self._feed(self.sink.synced)
            self._synced = True
