"""The live-cluster pieces the composition root (app.server) builds and starts and stops together.

KubeConnection holds what needs nothing of the service (the writer, the leader elector): the root builds the
engine and its state with them, then `connection.parts(state)` adds the list/watch source feeding that state."""
from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..logs import get_logger
from ..ports import ClusterWriter, ObjectSink

log = get_logger(__name__)


@dataclass(frozen=True)
class KubeConnection:
    """The writer and the leader elector of a live cluster, and how to build its source for a sink."""
    writer: ClusterWriter | None
    elector: object | None          # anything with is_leader(), start() and stop()
    source: Callable[[ObjectSink], object]      # sink -> a source with start() and stop()
    restore: bool = True

    def parts(self, sink: ObjectSink) -> "KubeParts":
        return KubeParts(self.source(sink), self.writer, self.elector, self.restore)


class KubeParts:
    """The live-cluster pieces: a list/watch source feeding the state, the writer, the leader elector."""

    def __init__(self, source, writer: ClusterWriter, elector=None, restore: bool = True):
        self.source = source
        self.writer = writer
        self.elector = elector
        self.restore = restore
        self.freeze_gc = False               # set by create_app(serving=True)
        self._stopped = threading.Event()

    def start(self, state, restore: Callable[[], None] | None = None) -> None:
        """Start watching; once the first full sync is in, `restore` (the engine's) gives partly bound gangs
        their plans back, and only then does the elector run for the Lease: a replica that leads can answer at
        once, so a leader handing over (LeaderElector.hand_over) is followed by one that is Ready."""
        self.source.start()
        threading.Thread(target=self._after_sync, args=(state, restore or (lambda: None)), name="after-sync",
                         daemon=True).start()

    def _after_sync(self, state, restore: Callable[[], None]) -> None:
        """Once the first full sync is in, give partly bound gangs their plans back and start the elector (in a
        thread, so the server starts answering probes at once). Gives up when the parts stop before any sync."""
        while not state.synced_once:
            if self._stopped.wait(0.05):
                return
        if self.restore:
            try:
                restore()
            except Exception:        # the service still runs; those gangs are re-planned by their next pod
                log.exception("restoring gang plans failed")
        if self.elector is not None and not self._stopped.is_set():
            self.elector.start()
        if self.freeze_gc:
            gc.freeze()   # the synced cluster is long-lived: keep it out of every GC pass

    def stop(self) -> None:
        self._stopped.set()
        self.source.stop()
        if self.elector is not None:
            with contextlib.suppress(Exception):
                self.elector.stop()
