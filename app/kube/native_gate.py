"""The native gate: where the API server serves scheduling.k8s.io PodGroups, the webhook puts each member of a
gang of ours in a native PodGroup (minCount = the gang's minimum, no topology constraint: the placement stays
ours) that this creates, owned by the workload. kube-scheduler's own PreEnqueue then holds the members until
the gang can be placed, at no cost to its loop (no held filter call) and no API write per pod.

`--native-gate` (TAS_NATIVE_GATE): auto (default) and on use it where PodGroups are served (on also logs when
they are not); off never does (members that come early are then refused, or held a few ms, by the filter).
Creation runs on one background thread, once per PodGroup name; an existing PodGroup (409) is fine.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from grouper.native import API_GROUP, gate_podgroup

log = logging.getLogger(__name__)
_REMEMBERED = 10_000


class NativeGate:
    def __init__(self, state, writer):
        self.state = state
        self.writer = writer             # the ClusterWriter that creates the gate PodGroups
        self._created: OrderedDict[tuple[str, str], bool] = OrderedDict()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._warned = False

    def version(self) -> str | None:
        """The served version of native PodGroups, when the live source lists them."""
        return getattr(self.state, "served_versions", {}).get((API_GROUP, "PodGroup"))

    def active(self) -> bool:
        settings = self.state.settings
        if settings.native_gate == "off" or settings.mode != "kubernetes":
            return False
        if self.version() is None:
            if settings.native_gate == "on" and not self._warned and getattr(self.state, "synced_once", False):
                self._warned = True
                log.warning("--native-gate=on but the API server serves no scheduling.k8s.io PodGroups "
                            "(feature gates off?); gang pods are gated by the filter instead")
            return False
        return True

    def ensure(self, namespace: str, name: str, minimum: int, owner: Mapping | None) -> None:
        """Create the gate PodGroup in the background unless it exists or was asked for already."""
        key = (namespace, name)
        if self.state.objects.get("PodGroup", namespace, name, group=API_GROUP) is not None:
            return
        with self._lock:
            if key in self._created:
                return
            self._created[key] = True
            while len(self._created) > _REMEMBERED:
                self._created.popitem(last=False)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="native-gate")
        body = gate_podgroup(name, namespace, minimum, owner, self.version() or "v1alpha2")
        self._pool.submit(self._create, namespace, body)

    def _create(self, namespace: str, body: dict) -> None:
        try:
            self.writer.create_podgroup(namespace, body)
        except Exception as error:      # noqa: BLE001 - the gang then waits at the filter, as without the gate
            with self._lock:
                self._created.pop((namespace, body["metadata"]["name"]), None)
            log.warning("could not create the native PodGroup %s/%s: %s", namespace, body["metadata"]["name"], error)
