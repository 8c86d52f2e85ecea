"""Read-only JSON views of the service for people and the /ui page: plans, topologies, health, metrics.

Amounts are integers in the units of the capacity matrices: cpu in millicores, memory and storage in
bytes, everything else (nvidia.com/gpu, pods) in whole units.
"""
from __future__ import annotations

import numpy as np
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from topology.counts import sum_by_level
from topology.objects import ObjectsError, parse_objects

from topology.nodes import NodeInfo

from .objects import pod_shape_problem


def node_problem(obj: dict) -> str | None:
    """Why a Node cannot join the cluster model (a quantity like `eight`), naming the field."""
    try:
        NodeInfo.from_object(obj)
    except ValueError as err:
        return str(err)
    return None
from .state import ServiceState, kind_of

router = APIRouter(tags=["debug"])


def service_of(request: Request) -> ServiceState:
    return request.app.state.service


@router.get("/healthz", summary="Liveness: the process answers")
def healthz() -> dict:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: first sync done and, with leader election, the leader")
def readyz(request: Request) -> JSONResponse:
    ready, reason = service_of(request).ready()
    return JSONResponse({"status": "ready" if ready else "not ready", "reason": reason},
                        status_code=200 if ready else 503)


@router.get("/metrics", summary="Prometheus metrics")
def metrics(request: Request) -> Response:
    return Response(service_of(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)


@router.get("/debug/plans", summary="Every gang plan: status, summary, group domains, reasons")
def plans(request: Request) -> dict:
    service = service_of(request)
    with service.lock:
        return {"plans": service.plans.to_json(), "counts": service.plans.status_counts(),
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
        return body


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
    applied = []
    for obj in objects:
        metadata = obj.get("metadata") or {}
        if not isinstance(metadata, dict) or not metadata.get("name"):
            raise HTTPException(400, f"{obj.get('kind')}: metadata.name is required")
        problem = pod_shape_problem(obj, f"Pod {metadata['name']}") if obj.get("kind") == "Pod" else None
        if obj.get("kind") == "Node":
            problem = node_problem(obj)
        if problem:                     # the watch never delivers such an object; it would break every verb
            raise HTTPException(422 if obj.get("kind") == "Node" else 400, problem)
        service.apply(kind_of(obj), "ADDED", obj)
        applied.append(f"{obj.get('kind')} {metadata.get('namespace') or ''}/{metadata['name']}".replace(" /", " "))
    return {"applied": applied}


@router.get("/debug/topology", summary="The topologies: levels, domain counts, member nodes")
def topologies(request: Request) -> dict:
    service = service_of(request)
    with service.lock:
        cluster = service.current_cluster()
        return {
            "topologies": [{
                "name": tree.name, "source": tree.source,
                "levels": [{"key": level.key, "alias": level.alias, "display": level.display,
                            "domains": tree.domain_count(i)} for i, level in enumerate(tree.levels)],
                "nodes": int(tree.member.sum()),
                "excluded": dict(tree.excluded),
            } for tree in sorted(cluster.topologies.values(), key=lambda t: t.name)],
            "errors": dict(cluster.topology_errors),
            "nodes": len(cluster.nodes),
            "resources": list(cluster.resources.names),
        }


@router.get("/debug/topology/{name}", summary="One topology as a tree with capacity, usage and reservations")
def topology(name: str, request: Request,
             resource: list[str] | None = Query(None, description="limit the figures to these resources")) -> dict:
    service = service_of(request)
    with service.lock:
        cluster = service.current_cluster()
        if name not in cluster.topologies:
            valid = ", ".join(sorted(cluster.topologies)) or "none"
            raise HTTPException(404, f"unknown topology {name!r}; valid topologies: {valid}")
        names = resource or list(cluster.resources.names)
        unknown = [r for r in names if r not in cluster.resources.column]
        if unknown:
            raise HTTPException(400, f"resource={unknown[0]!r} is offered by no node; valid: "
                                     f"{', '.join(cluster.resources.names)}")
        return _topology_tree(service, cluster.topologies[name], names)


def _topology_tree(service: ServiceState, tree, resources: list[str]) -> dict:
    cluster = service.cluster
    columns = [cluster.resources.column[r] for r in resources]
    usable, unusable = cluster.usable_free()
    # free: usable free capacity; unusable: free capacity on NotReady, cordoned or tainted nodes
    matrices = {"allocatable": cluster.capacity.allocatable, "used": cluster.capacity.used,
                "reserved": cluster.capacity.reserved, "free": usable, "unusable": unusable}
    sums = {kind: {r: sum_by_level(tree, matrix[:, c]) for r, c in zip(resources, columns)}
            for kind, matrix in matrices.items()}
    reservations: dict[int, list[str]] = {}
    for key, usage in cluster.reservations.items():
        reservations.setdefault(usage.node, []).append(key.removeprefix("gang:"))
    pods_on: dict[int, int] = {}
    for usage in cluster.pods.values():
        pods_on[usage.node] = pods_on.get(usage.node, 0) + 1

    def figures(level: int, domain: int) -> dict:
        return {kind: {r: int(sums[kind][r][level][domain]) for r in resources} for kind in matrices}

    def node_entry(index: int) -> dict:
        node = cluster.nodes[index]
        entry = {"node": node.name, "ready": node.ready, "schedulable": not node.unschedulable,
                 "taints": [f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in node.taints],
                 "pods": pods_on.get(index, 0), "reservations": sorted(reservations.get(index, []))}
        entry.update({kind: {r: int(matrix[index, c]) for r, c in zip(resources, columns)}
                      for kind, matrix in matrices.items()})
        return entry

    def walk(level: int, domain: int) -> dict:
        entry = {"level": tree.levels[level].display, "id": tree.domain_ids[level][domain],
                 "value": tree.domain_value(level, domain), **figures(level, domain)}
        if level + 1 < tree.depth:
            entry["children"] = [walk(level + 1, int(c)) for c in tree.children_of(level, domain)]
        else:
            entry["nodes"] = [node_entry(int(i)) for i in tree.nodes_in(level, domain)]
        return entry

    return {
        "name": tree.name, "source": tree.source,
        "levels": [level.display for level in tree.levels],
        "resources": resources,
        "units": {r: ("millicores" if r == "cpu" else "bytes" if r in ("memory", "ephemeral-storage")
                      else "units") for r in resources},
        "domains": [walk(0, root) for root in range(tree.domain_count(0))],
        "excluded": dict(tree.excluded),
        "totals": {kind: {r: int(np.asarray(matrix[:, c])[tree.member].sum()) for r, c in zip(resources, columns)}
                   for kind, matrix in matrices.items()},
    }
