"""A request to the API server leaves in one write: head and body together.

urllib3 2.x sends a request's head (`endheaders()`) and then its body in separate `send()` calls: over TLS two
records, two encryptions and two `sendall` system calls per Binding POST (on loopback each send also runs the
receiver's side in the sender's kernel context). These connection classes hold what `request()` sends and write
it once at its end; what a request puts on the wire, and when the answer is read, is unchanged.
"""
from __future__ import annotations

from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.poolmanager import PoolManager


class _OneWrite:
    _held: list[bytes] | None = None

    def request(self, *args, **kwargs) -> None:          # noqa: D401 - urllib3's signature
        self._held = []
        try:
            super().request(*args, **kwargs)              # type: ignore[misc]
            data = b"".join(self._held)
        finally:
            self._held = None
        if data:
            super().send(data)                            # type: ignore[misc]

    def send(self, data) -> None:
        held = self._held
        if held is not None and isinstance(data, (bytes, bytearray, memoryview)):
            held.append(bytes(data))
            return
        if held:                                          # a file-like body: what is held goes first
            self._held = []
            super().send(b"".join(held))                  # type: ignore[misc]
        super().send(data)                                # type: ignore[misc]


class OneWriteHTTPConnection(_OneWrite, HTTPConnection):
    pass


class OneWriteHTTPSConnection(_OneWrite, HTTPSConnection):
    pass


class _Pool(HTTPConnectionPool):
    ConnectionCls = OneWriteHTTPConnection


class _TLSPool(HTTPSConnectionPool):
    ConnectionCls = OneWriteHTTPSConnection


def install(pool_manager) -> None:
    """Make the pools `pool_manager` creates from now on use the one-write connections (a proxy manager, whose
    pools tunnel, is left as it is)."""
    if type(pool_manager) is PoolManager:
        pool_manager.pool_classes_by_scheme = {"http": _Pool, "https": _TLSPool}
