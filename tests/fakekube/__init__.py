"""An in-process fake Kubernetes API server for tests (see store.py for the state, server.py for HTTP).

Use the `fake_kube` fixture: it yields a `FakeKube` (reset to an empty cluster) whose `.url` is the running
server's address; seed and change objects with `create`, `update`, `remove`, `install_crd`, `compact`,
`fail` (inject error answers) and `refuse_eviction` (a PodDisruptionBudget stand-in).
"""
from __future__ import annotations

import atexit
import contextlib
import time
from collections.abc import Callable, Iterator

import pytest

from .server import build_app, serve
from .store import ApiError, FakeKube, Resource, merge_patch

__all__ = ["ApiError", "FakeKube", "Resource", "build_app", "fake_kube", "merge_patch", "serve", "wait_until"]


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll until `predicate()` is truthy; fail the test with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


_shared: FakeKube | None = None


def _shared_fake() -> FakeKube:
    """One server per test process (starting and stopping uvicorn per test costs more than the tests)."""
    global _shared
    if _shared is None:
        fake = FakeKube()
        stack = contextlib.ExitStack()
        stack.enter_context(serve(fake))
        atexit.register(stack.close)
        _shared = fake
    return _shared


@pytest.fixture
def fake_kube() -> Iterator[FakeKube]:
    """A running fake API server, reset to an empty cluster; `.url` is its address."""
    fake = _shared_fake()
    fake.reset()
    yield fake
    fake.reset()           # ends watches a test left open (they get a 410 and their source is stopped)
