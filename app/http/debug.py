"""Read-only JSON views of the service for people and the /ui page: plans, topologies, health, metrics.

Amounts are integers in the units of the capacity matrices: cpu in millicores, memory and storage in
bytes, everything else (nvidia.com/gpu, pods) in whole units.
"""
from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.middleware.gzip import GZipMiddleware
from prometheus_client import CONTENT_TYPE_LATEST

from topology.objects import ObjectsError, parse_objects

from topology.nodes import NodeInfo
from topology.tree import HOSTNAME_LABEL

from topology.fragmentation import ShapeError

from .. import fragmentation
from ..scheduling import native_groups
from ..scheduling.preemptor import running_gangs
from ..scheduling.whatif import UnknownGang, unplanned_gangs
from ..scheduling.whatif import closest as closest_domains_of
from ..scheduling.whatif import whatif as advice_for
from ..state.objects import metadata_problem, pod_shape_problem
from ..state.plans import GANG_REFUSED
from ..object_types import type_problem
from .query_errors import ClearParameterErrors
from .ui import tree_data


def node_problem(obj: dict) -> str | None:
    """Why a Node cannot join the cluster model (a quantity like `eight`), naming the field."""
    try:
        NodeInfo.from_object(obj)
    except ValueError as err:
        return str(err)
    return None
from ..state import ServiceState, kind_of

router = APIRouter(tags=["debug"], route_class=ClearParameterErrors)
probes = APIRouter(tags=["health"])      # on the main port in every mode (app/listeners.py)
GZIP_PATHS = ("/debug/", "/ui", "/metrics")      # read by people and tools; never the extender's hot verbs


class DebugGZip:
    """Gzip for the debug API, the page and the metrics when the client accepts it (a topology tree of
    16,384 nodes is megabytes of JSON). The extender verbs and the webhook stay uncompressed: kube-scheduler
    accepts gzip, and compressing every filter answer would cost its loop more CPU than it saves on loopback."""

    def __init__(self, app, minimum_size: int = 500):
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=minimum_size)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith(GZIP_PATHS):
            await self.gzip(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def service_of(request: Request) -> ServiceState:
    return request.app.state.service


def running_index(request: Request):
    """The preemptor's index of running pods (None without one: the search builds its own)."""
    engine = getattr(request.app.state, "engine", None)
    preemptor = getattr(engine, "preemptor", None)
    return preemptor.running if preemptor is not None else None


@probes.get("/healthz", summary="Liveness: the process answers")
def healthz() -> dict:
    return {"status": "ok"}


@probes.get("/readyz", summary="Readiness: first sync done and, with leader election, the leader")
def readyz(request: Request) -> JSONResponse:
    ready, reason = service_of(request).ready()
    return JSONResponse({"status": "ready" if ready else "not ready", "reason": reason},
                        status_code=200 if ready else 503)


@probes.get("/metrics", summary="Prometheus metrics")
def metrics(request: Request) -> Response:
    return Response(service_of(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


@router.get("/debug/plans", summary="Every gang plan: status, summary, group domains, reasons")
def plans(request: Request) -> dict:
    service = service_of(request)
    with service.lock:
        return {"plans": service.plans.to_json(), "counts": service.plans.status_counts(), "now": service.clock(),
                "native": native_groups.problems(service),
                "unplanned": unplanned_gangs(service),
                "reservations": service.plans.reservation_count(),
                "settings": {"strategy": service.settings.strategy,
                             "reservation_ttl": service.settings.reservation_ttl,
                             "preemption": service.settings.preemption}}


@router.get("/debug/plans/{namespace}/{name}", summary="One gang plan with every slot")
def plan(namespace: str, name: str, request: Request) -> dict:
    service = service_of(request)
    with service.lock:
        found = service.plans.get(f"{namespace}/{name}")
        if found is None:
            known = ", ".join(sorted(p.key for p in service.plans)) or "none"
            raise HTTPException(404, f"no plan for gang {namespace}/{name}; known gangs: {known}")
        body = found.to_json()
        leaf_of = {str(slot): group.name for group in found.tree.groups() for slot in group.slots}
        for entry in body["slots"]:          # the leaf group (segment) of each slot: /ui colours by it
            entry["group"] = leaf_of.get(entry["slot"])
        if found.status == GANG_REFUSED:      # the domains that came closest and what each lacks
            body["closest"] = closest_domains_of(service, found, index=running_index(request))
        return body


@router.get("/debug/whatif/{namespace}/{name}", summary="What would make a refused gang fit (changes nothing)")
def whatif(namespace: str, name: str, request: Request) -> dict:
    """For a refused gang: the cheapest evictions that let it fit (lowest priority first, fewest gangs
    broken, fewest GPUs, fewest pods; never DaemonSet or static pods, nor pods a PodDisruptionBudget protects), in
    which domain, and the placement that would follow; or why nothing short of more nodes helps. The
    same search as preemption, so advice and action agree."""
    try:
        return advice_for(service_of(request), f"{namespace}/{name}", request.app.state.engine.preemptor)
    except UnknownGang as err:
        raise HTTPException(404, err.args[0]) from None


@router.post("/debug/objects", summary="Standalone mode: add or replace objects (workloads, pods, nodes)")
async def add_objects(request: Request) -> dict:
    """Feed YAML or JSON objects (one, a List, or several documents) to the in-memory cluster, as a watch
    would: e.g. the Job whose pods you then send through filter. Refused against a live cluster."""
    service = service_of(request)
    if service.settings.mode != "standalone":
        raise HTTPException(409, "POST /debug/objects only works in standalone mode; "
                                 "in a cluster, create the objects with kubectl")
    body = await request.body()
    if len(body) > service.settings.max_request_bytes:
        raise HTTPException(413, f"body exceeds {service.settings.max_request_bytes} bytes")
    try:
        objects = parse_objects(body.decode("utf-8", errors="replace"))
    except ObjectsError as err:
        raise HTTPException(400, str(err)) from None
    for obj in objects:                 # every object checked before any is applied: all or nothing
        problem = _object_problem(obj)
        if problem:
            raise HTTPException(problem[0], problem[1])
    applied = []
    for obj in objects:
        metadata = obj["metadata"]
        service.apply(kind_of(obj), "ADDED", obj)
        applied.append(f"{obj.get('kind')} {metadata.get('namespace') or ''}/{metadata['name']}".replace(" /", " "))
    return {"applied": applied}


def _object_problem(obj: dict) -> tuple[int, str] | None:
    """Why the watch would never deliver `obj` (it would break every verb): (HTTP status, what is wrong)."""
    status = 422 if obj.get("kind") == "Node" else 400
    problem = type_problem(obj)         # the API server's schema: a field of the wrong JSON type
    if problem:
        return status, problem
    metadata = obj["metadata"]
    if not metadata.get("name"):
        return 400, f"{obj['kind']}: metadata.name is required"
    if obj["kind"] == "Pod":
        problem = pod_shape_problem(obj, f"Pod {metadata['name']}")
    elif obj["kind"] == "Node":
        problem = node_problem(obj)
    else:
        problem = metadata_problem(metadata, f"{obj['kind']} {metadata['name']}")
    return (status, problem) if problem else None


@router.get("/debug/dra", summary="DRA devices: classes counted, classes skipped (CEL errors), free devices")
def dra(request: Request) -> dict:
    """Per DeviceClass the extended resource it serves and its devices in the cluster (all, free); the
    classes skipped with the error of their CEL selector; ResourceSlice problems."""
    state = request.app.state.service
    with state.lock:
        cluster = state.cluster
        devices = cluster.devices
        classes = {}
        for name in sorted(devices.classes):
            column = cluster.resources.column.get(name)
            classes[name] = {
                "extendedResourceName": devices.classes[name].extended_resource,
                "error": devices.errors.get(name),
                "failed": devices.failure(name),
                "devices": int(cluster.capacity.allocatable[:, column].sum()) if column is not None else 0,
                "free": int(cluster.capacity.free[:, column].clip(0).sum()) if column is not None else 0}
        return {"classes": classes, "pools": len(devices.pools), "allocatedDevices": len(devices.allocated),
                "sliceProblems": list(devices.problems)}


@router.get("/debug/topology", summary="The topologies: levels, domain counts, member nodes, fragmentation")
def topologies(request: Request,
               shape: list[str] | None = Query(None, description="pod shapes for the largest gang that fits, "
                                                                 "e.g. nvidia.com/gpu=8 (default: one unit and a "
                                                                 "whole node)"),
               below_priority: int | None = Query(None, description="also the largest gang if every evictable pod "
                                                                    "of a lower priority were gone"),
               domains: bool = Query(False, description="whole free nodes and children per domain")) -> dict:
    """Each topology's `fragmentation`: whole free nodes and domains per level, and the largest gang of
    each shape that fits now when it requires each level (see docs/ui.md)."""
    service = service_of(request)
    with service.lock:
        cluster = service.cluster
        try:
            shapes = fragmentation.shapes_for(cluster, shape)
        except ShapeError as err:
            raise HTTPException(400, f"shape: {err}") from None
        running = running_gangs(service, running_index(request)) if below_priority is not None else None
        measures = fragmentation.measure_cluster(cluster, shapes, running, below_priority)
        return {
            "topologies": [{
                "name": tree.name, "source": tree.source,
                "levels": [{"key": level.key, "alias": level.alias, "display": level.display,
                            "domains": tree.domain_count(i)} for i, level in enumerate(tree.levels)],
                "nodes": int(tree.member.sum()),
                "excluded": dict(tree.excluded),
                "fragmentation": measures[tree.name].to_json(tree, per_domain=domains),
            } for tree in sorted(cluster.topologies.values(), key=lambda t: t.name)],
            "errors": dict(cluster.topology_errors),
            "nodes": len(cluster.nodes),
            "resources": list(cluster.resources.names),
        }


@router.get("/debug/topology/{name}", summary="One topology as a tree with capacity, usage and reservations")
def topology(name: str, request: Request,
             resource: list[str] | None = Query(None, description="limit the figures to these resources"),
             depth: int | None = Query(None, ge=1, description="levels to include below the start (default: all); "
                                                               "a domain cut off carries a heat strip of its children"),
             domain: str | None = Query(None, description="start at this domain id instead of the top")) -> Response:
    """Built from a snapshot after the state lock is released; ETag / If-None-Match gives a 304 while the
    cluster generation is unchanged (the page polls it every few seconds)."""
    service = service_of(request)
    cache = _tree_cache(request)
    with service.lock:
        cluster = service.cluster
        if name not in cluster.topologies:
            valid = ", ".join(sorted(cluster.topologies)) or "none"
            raise HTTPException(404, f"unknown topology {name!r}; valid topologies: {valid}")
        names = resource or list(cluster.resources.names)
        unknown = [r for r in names if r not in cluster.resources.column]
        if unknown:
            raise HTTPException(400, f"resource={unknown[0]!r} is offered by no node; valid: "
                                     f"{', '.join(cluster.resources.names)}")
        tree = cluster.topologies[name]
        if domain is not None and not any(domain in index for index in tree.domain_index):
            raise HTTPException(404, f"domain={domain!r} is not a domain of topology {name!r}; "
                                     f"ids are paths such as {tree.domain_ids[-1][0]!r}")
        key = (service.generation, name, tuple(names), depth, domain)
        answer = cache.get(key)
        snap = None if answer is not None else tree_data.snapshot(service, tree, names)
    if answer is None:
        answer = cache.put(key, tree_data.build(snap, depth, domain))
    etag, body = answer
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


def _tree_cache(request: Request) -> tree_data.TreeCache:
    state = request.app.state
    if getattr(state, "tree_cache", None) is None:
        state.tree_cache = tree_data.TreeCache()
    return state.tree_cache


@router.get("/debug/search", summary="Find domains, nodes, gangs, workloads, namespaces and pods by name (for the page)")
def search(request: Request, q: str = Query(..., min_length=1, description="part of a name, case-insensitive"),
           topology: str | None = Query(None, description="give each node's domain path in this topology "
                                                          "(default: every topology, in `paths`)"),
           limit: int = Query(20, ge=1, le=200)) -> dict:
    service = service_of(request)
    needle = q.lower()
    with service.lock:
        cluster = service.cluster
        if topology and topology not in cluster.topologies:
            known = ", ".join(sorted(cluster.topologies)) or "none"
            raise HTTPException(404, f"unknown topology {topology!r}; known topologies: {known}")
        trees = [cluster.topologies[topology]] if topology else [cluster.topologies[n] for n in sorted(cluster.topologies)]

        def where(node: int) -> dict:
            paths = {tree.name: _path(tree, node) for tree in trees}
            first = next((path for path in paths.values() if path), [])
            return {"path": first, "paths": paths}

        domains = _domains_named(trees, needle, limit)
        nodes = []
        for index, node in enumerate(cluster.nodes):
            if needle in node.name.lower() and len(nodes) < limit:
                nodes.append({"node": node.name, **where(index)})
        gangs = [{"gang": p.key, "workload": p.tree.workload or p.tree.name, "namespace": p.tree.namespace,
                  "topology": p.topology}
                 for p in service.plans if needle in f"{p.key} {p.tree.workload}".lower()][:limit]
        pods = []
        for key, usage in cluster.pods.items():
            if needle in key.lower() and len(pods) < limit:
                pods.append({"pod": key, "node": cluster.node_names[usage.node], **where(usage.node)})
    return {"query": q, "domains": domains, "nodes": nodes, "gangs": gangs, "pods": pods}


def _domains_named(trees, needle: str, limit: int) -> list[dict]:
    """Domains of every level whose own name holds `needle` (a host level's domains are the nodes, found
    as nodes); `path`: the ids from the top level down to the domain's own."""
    found = []
    for tree in trees:
        for level, info in enumerate(tree.levels):
            if info.key == HOSTNAME_LABEL:
                continue
            for domain_id in tree.domain_ids[level]:
                if needle in domain_id.rsplit("/", 1)[-1].lower():
                    parts = domain_id.split("/")
                    found.append({"domain": domain_id, "level": info.display, "topology": tree.name,
                                  "path": ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]})
                    if len(found) == limit:
                        return found
    return found


def _path(tree, node: int) -> list[str]:
    """The ids of the domains holding a node, top level first ([] outside the topology)."""
    if tree is None or not tree.member[node]:
        return []
    return [tree.domain_ids[level][int(tree.node_domain[level][node])] for level in range(tree.depth)]
