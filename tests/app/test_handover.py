"""A leader being stopped hands its Lease over (issue 40, the upgrade): the elector runs only once the
cluster is synced, /readyz stays ready while a leader hands over, and the first SIGTERM waits for the
hand-over before uvicorn shuts down. The real thing, on a control plane: tests/e2e/test_e2e_upgrade.py."""
from __future__ import annotations

import signal
import time
import types

from app.kube.parts import KubeParts
from app.listeners import hand_over_on_exit
from app.settings import Settings
from app.state import ServiceState


class _Source:
    def start(self):
        pass

    def stop(self):
        pass


class _Elector:
    """Records what happens to it; hand_over answers `successor` after `delay` seconds."""

    def __init__(self, events: list, successor: str | None = "b", delay: float = 0.0):
        self.events, self.successor, self.delay = events, successor, delay
        self.leading, self.handing_over = False, False

    def start(self):
        self.events.append("elector started")

    def stop(self, release: bool = True):
        self.events.append("elector stopped")

    def is_leader(self) -> bool:
        return self.leading

    def serving(self) -> bool:
        return self.leading or self.handing_over

    def hand_over(self, timeout: float):
        self.events.append(f"hand over ({timeout:g}s)")
        self.leading, self.handing_over = False, True
        time.sleep(self.delay)
        return self.successor


def _wait(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_elector_runs_for_the_lease_only_once_the_cluster_is_synced_and_plans_are_restored():
    events: list[str] = []
    parts = KubeParts(_Source(), writer=None, elector=_Elector(events))
    state = types.SimpleNamespace(synced_once=False)
    parts.start(state, restore=lambda: events.append("plans restored"))
    time.sleep(0.3)
    assert events == []                  # a replica that could not answer yet must not lead
    state.synced_once = True
    _wait(lambda: "elector started" in events)
    assert events == ["plans restored", "elector started"]
    parts.stop()


def test_a_leader_handing_over_stays_ready():
    events: list[str] = []
    elector = _Elector(events)
    state = ServiceState(Settings(leader_elect=True), elector=elector)
    state.synced()
    elector.leading = True
    assert state.ready() == (True, "ok")
    elector.hand_over(1)
    assert not state.is_leader()          # the leader's background work stops
    assert state.ready() == (True, "ok")  # the Service may still route to it until its successor is routed


def _main() -> types.SimpleNamespace:
    main = types.SimpleNamespace(exits=[])
    main.handle_exit = lambda sig, frame: main.exits.append((sig, time.monotonic()))
    return main


def test_the_first_sigterm_hands_the_lease_over_then_drains_then_exits():
    events: list[str] = []
    main = _main()
    state = types.SimpleNamespace(elector=_Elector(events, delay=0.1))
    hand_over_on_exit(main, state, Settings(leader_elect=True, handover_timeout=7, handover_drain=0.3))
    signalled = time.monotonic()
    main.handle_exit(signal.SIGTERM, None)
    assert main.exits == []               # the signal handler returns at once; the hand-over runs beside it
    _wait(lambda: main.exits)
    (sig, at), = main.exits
    assert events == ["hand over (7s)"] and sig == signal.SIGTERM
    assert at - signalled >= 0.1 + 0.3    # the hand-over, then the drain


def test_no_successor_means_no_drain_and_a_second_signal_stops_at_once():
    events: list[str] = []
    main = _main()
    hand_over_on_exit(main, types.SimpleNamespace(elector=_Elector(events, successor=None)),
                      Settings(leader_elect=True, handover_drain=60))
    main.handle_exit(signal.SIGTERM, None)
    _wait(lambda: main.exits)             # nobody took over: no 60 s drain
    assert events == ["hand over (15s)"]

    slow = _Elector([], delay=60)
    main = _main()
    hand_over_on_exit(main, types.SimpleNamespace(elector=slow), Settings(leader_elect=True))
    main.handle_exit(signal.SIGTERM, None)
    main.handle_exit(signal.SIGINT, None)
    assert [sig for sig, _ in main.exits] == [signal.SIGINT]


def test_without_leader_election_the_signal_goes_straight_to_uvicorn():
    main = _main()
    handler = main.handle_exit
    hand_over_on_exit(main, types.SimpleNamespace(elector=None), Settings())
    assert main.handle_exit is handler
