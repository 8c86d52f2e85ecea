"""create_app: the FastAPI application of `tas-extender serve`.

    app = create_app(Settings())                       # standalone on the demo cluster
    app = create_app(Settings(cluster="dump.yaml"))    # standalone on a cluster dump
    app = create_app(Settings(kubeconfig="~/.kube/config"))   # live cluster (list/watch, Binding API)

The composition root: everything is built here once, in dependency order, and handed down; nothing below
holds a reference back up. `app.state.service` is the ServiceState (what the service knows; the webhook and
the debug API read it), `app.state.engine` the GangScheduler (app.scheduling) behind the extender verbs.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import time
from collections.abc import Callable, Iterable, Mapping

from fastapi import FastAPI

from .cluster_file import load_objects
from .http.debug import DebugGZip, probes
from .http.debug import router as debug_router
from .http.direct import DirectRoutes
from .http.extender import build_router, endpoints
from .http.ui import router as ui_router
from .http.webhook import mutate_direct
from .http.webhook import router as webhook_router
from .kube.native_gate import NativeGate
from .kube.parts import KubeConnection
from .listeners import debug_apart, sub_app, verbs_apart
from .logs import fields, get_logger
from .memory import MemoryWriter, load_into, place_demo_gangs
from .ports import ClusterWriter
from .scheduling import GangScheduler
from .settings import Settings
from .state import ServiceState

log = get_logger(__name__)

# The event loop answers kube-scheduler while threads compute (a victim search, a relist's rebuild). A
# thread waiting for the interpreter lock gets it only when the holder's switch interval ends, 5 ms by
# default: a filter arriving during a search could wait that long. 0.5 ms bounds that wait.
SWITCH_INTERVAL = 0.0005


def create_app(settings: Settings | None = None, *, objects: Iterable[Mapping] | None = None,
               writer: Callable[[ServiceState], ClusterWriter] | None = None, elector=None,
               clock: Callable[[], float] = time.time,
               kube: Callable[[Settings], KubeConnection] | None = None,
               serving: bool = False) -> FastAPI:
    """The service. Standalone unless settings name a kubeconfig or in-cluster config (or `kube` is
    given); `objects` replaces the demo / --cluster file in standalone mode; `kube(settings)` builds the
    Kubernetes connection instead of app.kube.adapters (tests point it at a fake API server). `writer(state)`
    builds the ClusterWriter instead of the mode's own (MemoryWriter, or the connection's); `elector` is the
    standalone service's leader elector (none: it always leads).
    `serving` (the serve command, and benchmarks that measure it): this process serves this app alone, so
    the loaded cluster moves out of the garbage collector's passes and threads switch sooner (see
    SWITCH_INTERVAL)."""
    settings = settings or Settings()
    if serving:
        sys.setswitchinterval(SWITCH_INTERVAL)
    standalone = kube is None and settings.mode == "standalone"
    # 1. what reaches the cluster and needs nothing of ours: a live cluster's writer and elector
    connection = None if standalone else (kube or build_kube_connection)(settings)
    if connection is not None:
        elector = connection.elector
        writer = writer or (lambda _state: connection.writer)
    # 2. the engine, which builds and owns the state; the writer is built from that state (MemoryWriter
    #    changes it, as the API server would)
    engine = GangScheduler(settings, clock=clock, elector=elector, writer=writer or MemoryWriter)
    state = engine.state
    # 3. what feeds the state: the live cluster's list/watch source, or the standalone objects
    background: list = []
    if connection is not None:
        parts = connection.parts(state)
        parts.freeze_gc = serving
        background.append(parts)
    else:
        fleet = demo_fleet(settings.demo_size) if objects is None and settings.demo_size else None
        if fleet is not None:
            objects = [*fleet[0], *fleet[1], fleet[2]]
        load_into(state, objects if objects is not None else load_objects(settings.cluster))
        engine.restore()
        if fleet is not None:
            log.info("placing the demo fleet's gangs", extra=fields(nodes=settings.demo_size, gangs=len(fleet[1])))
            place_demo_gangs(engine, fleet[1], fleet[2])
        if serving:
            gc.freeze()   # the loaded cluster is long-lived: keep it out of every GC pass
        log.info("standalone cluster loaded", extra=fields(
            source=settings.cluster or "built-in demo", nodes=len(state.cluster.nodes),
            topologies=sorted(state.cluster.topologies)))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        for part in background:
            part.start(state, engine.restore)
        loops = [asyncio.create_task(_expire_forever(state))]
        if settings.gate_unfit_gangs:  # whatever the webhook gates is lifted, standalone too
            loops.append(asyncio.create_task(_release_gated_forever(engine)))
        if background:                 # a live cluster: kube-scheduler parks refused pods until woken
            loops.append(asyncio.create_task(_wake_forever(engine)))
            loops.append(asyncio.create_task(_evict_stale_forever(engine)))
        try:
            yield
        finally:
            for loop in loops:
                loop.cancel()
            for part in background:
                part.stop()

    app = FastAPI(title="tas-extender", version="0.1.0", lifespan=lifespan,
                  description="Topology-aware gang and segment scheduler extender")
    app.state.service = state
    app.state.engine = engine
    app.state.native_gate = NativeGate(state, engine.writer)
    app.state.listeners = {}                   # routes kept off the main port (see app/listeners.py)
    verbs, debug = build_router(settings.url_prefix), [debug_router, ui_router]
    direct = {"/mutate": mutate_direct}           # the calls on kube-scheduler's loop skip FastAPI's stack
    if verbs_apart(settings):
        app.state.listeners["verbs"] = sub_app(state, "tas-extender verbs", [verbs], engine)
        app.state.listeners["verbs"].add_middleware(DirectRoutes, routes=endpoints(settings.url_prefix))
    else:
        app.include_router(verbs)
        direct.update(endpoints(settings.url_prefix))
    if debug_apart(settings):
        app.state.listeners["debug"] = sub_app(state, "tas-extender debug", debug, engine)
        app.state.listeners["debug"].add_middleware(DebugGZip)
    else:
        for router in debug:
            app.include_router(router)
    app.include_router(probes)
    app.include_router(webhook_router)
    app.add_middleware(DebugGZip)
    app.add_middleware(DirectRoutes, routes=direct)
    return app


def demo_fleet(node_count: int) -> tuple[list[dict], list[dict], dict]:
    """(the fleet's nodes, pods and Topology; its running gangs' workloads; the refused one)."""
    from topology.demo import fleet_objects, fleet_workloads
    running, refused = fleet_workloads(node_count)
    return fleet_objects(node_count), running, refused


async def _repeat(call: Callable[[], object], period: float, failure: str) -> None:
    """`call` every `period` seconds in a thread (it waits for the state lock: not on the loop), forever."""
    while True:
        await asyncio.sleep(period)
        try:
            await asyncio.to_thread(call)
        except Exception:        # keep the loop alive; the next round retries
            log.exception(failure)


async def _expire_forever(state: ServiceState) -> None:
    await _repeat(state.expire, max(0.5, min(5.0, state.settings.reservation_ttl / 4)), "reservation expiry failed")


async def _wake_forever(engine: GangScheduler, period: float = 1.0) -> None:
    await _repeat(engine.wake_refused, period, "waking refused pods failed")


async def _release_gated_forever(engine: GangScheduler, period: float = 1.0) -> None:
    """Lift the scheduling gate of gated gangs that fit now (app/scheduling/unfit_gate.py)."""
    await _repeat(engine.unfit.release_due, period, "lifting scheduling gates failed")


async def _evict_stale_forever(engine: GangScheduler) -> None:
    grace = engine.state.settings.staleness_grace_period     # a PodGroup or annotation may enable what this disables
    await _repeat(engine.stale.evict_due, 5.0 if grace <= 0 else max(0.5, min(5.0, grace / 4)),
                  "stale gang eviction failed")


def build_kube_connection(settings: Settings) -> KubeConnection:
    """The Kubernetes adapters (app/kube) for a kubeconfig or the in-cluster config."""
    from .kube import adapters      # the kubernetes client is imported only for a live cluster
    return adapters(settings)
