"""Memory the webhook keeps between requests: owners not seen yet (groupings live in the service's one
IdentityCache, app/state/identities.py)."""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable


class OwnerWaits:
    """When each owner was first missing from the cache: pods wait for the watch only so long."""

    def __init__(self, limit: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self._first_miss: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()
        self._limit = limit
        self.clock = clock

    def waited(self, key: str, record: bool = True) -> float:
        """Seconds since `key` was first missed (0 the first time); `record=False` changes nothing."""
        now = self.clock()
        with self._lock:
            first = self._first_miss.get(key)
            if first is None and record:
                self._first_miss[key] = now
                while len(self._first_miss) > self._limit:
                    self._first_miss.popitem(last=False)
        return 0.0 if first is None else now - first

    def found(self, key: str) -> None:
        with self._lock:
            self._first_miss.pop(key, None)
