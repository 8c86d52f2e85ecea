"""POST <prefix>/filter, /prioritize, /bind, /preempt: the kube-scheduler extender protocol.

Always HTTP 200. Errors go in `Error` (filter, bind); prioritize and preempt have no such field in
the protocol, so a bad request gets an empty answer and the reason in the `X-Extender-Error` header.
Bodies are parsed with orjson and validated by the wire models; answers are serialised with orjson.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from ...logs import fields, get_logger
from ...scheduling import GangScheduler
from ...scheduling.candidates import all_strings
from ...wire import BadRequest, describe_errors
from ..body import read_limited
from .models import ExtenderArgs, ExtenderBindingArgs, ExtenderPreemptionArgs

log = get_logger(__name__)


def _json(body, error: str = "") -> Response:
    headers = {"X-Extender-Error": error.encode("ascii", "replace").decode()[:500]} if error else None
    return Response(orjson.dumps(body), media_type="application/json", headers=headers)


def _describe(err: ValidationError, model: type) -> str:
    return (f"invalid {model.__name__}: {describe_errors(err, '(body)')} "
            f"(fields: {', '.join(model.model_fields)})")


async def parse(request: Request, model: type):
    return _validate(model, await _read_object(request, model))


async def _read_object(request: Request, model: type) -> dict:
    limit = request.app.state.service.settings.max_request_bytes
    body = await read_limited(request, limit)
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise BadRequest(f"request body is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise BadRequest(f"request body must be a JSON object ({model.__name__}), got {type(data).__name__}")
    return data


def _validate(model: type, data: dict):
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise BadRequest(_describe(err, model)) from None


async def parse_args(request: Request) -> ExtenderArgs:
    """ExtenderArgs; NodeNames (thousands of names) checked in one call rather than item by item, and
    by the model, for its error message, only when that check fails."""
    data = await _read_object(request, ExtenderArgs)
    names = data.get("NodeNames")
    if not all_strings(names):
        return _validate(ExtenderArgs, data)
    args = _validate(ExtenderArgs, {key: value for key, value in data.items() if key != "NodeNames"})
    args.NodeNames = names
    return args


def _candidates(args: ExtenderArgs) -> list[str]:
    if args.NodeNames is not None:
        return args.NodeNames
    if args.Nodes is not None:
        return [(n.get("metadata") or {}).get("name", "") for n in args.Nodes.items]
    return []


def build_router(prefix: str) -> APIRouter:
    router = APIRouter(prefix=prefix, tags=["extender"])
    # Plain Starlette routes: each handler reads and answers the raw body itself, so FastAPI's
    # per-request dependency and response handling would only add time (about 0.04 ms a call, a tenth
    # of a gang pod's filter at 5,000 nodes). They are not in /openapi.json; docs/service.md documents them.
    # The service serves the same endpoints through app.http.direct, ahead of the router.
    for path, endpoint in endpoints(prefix).items():
        router.add_route(path, endpoint, methods=["POST"])
    return router


def endpoints(prefix: str) -> dict:
    """{path: endpoint(request)} of the four verbs."""
    def timed(verb: str, handler: Callable):
        async def endpoint(request: Request) -> Response:
            service = request.app.state.service
            started = time.perf_counter()
            try:
                return await handler(request, request.app.state.engine)
            except BadRequest as err:
                service.metrics.errors.labels(verb).inc()
                log.warning("bad request", extra=fields(verb=verb, error=str(err)))
                return _error_answer(verb, str(err))
            except ClientDisconnect:
                raise                    # nobody to answer (app.http.direct)
            except Exception as err:     # never let one request take the process down
                service.metrics.errors.labels(verb).inc()
                log.exception("request failed", extra=fields(verb=verb))
                return _error_answer(verb, f"internal error in {verb}: {type(err).__name__}: {err}")
            finally:
                service.metrics.latency.labels(verb).observe(time.perf_counter() - started)
        endpoint.__name__ = verb
        return endpoint

    return {f"{prefix}/{verb}": timed(verb, handler)
            for verb, handler in (("filter", _filter), ("prioritize", _prioritize), ("bind", _bind),
                                  ("preempt", _preempt))}


def _error_answer(verb: str, message: str) -> Response:
    if verb == "filter":
        return _json({"Nodes": None, "NodeNames": [], "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
                      "Error": message})
    if verb == "bind":
        return _json({"Error": message})
    if verb == "prioritize":
        return _json([], error=message)
    return _json({"NodeNameToMetaVictims": {}}, error=message)


async def _on_loop_unless_busy(state, call: Callable, *args):
    """Filter and prioritize are CPU work well under a millisecond: they run on the event loop, where a
    thread hop would cost as much as the work (and the GIL gives threads no parallelism for it). But
    while another thread holds the state lock (a relist rebuilding the cluster, a bind's accounting),
    waiting for it there would freeze the loop and every other request, probes included: then the call
    waits in the threadpool instead. So does a call that would first rebuild a stale cluster model."""
    lock = state.lock
    if not state.stale and lock.acquire(blocking=False):
        try:
            return call(*args)
        finally:
            lock.release()
    return await run_in_threadpool(call, *args)


async def _filter(request: Request, gangs: GangScheduler) -> Response:
    args = await parse_args(request)
    candidates = _candidates(args)
    outcome = await gangs.member_wait.filter(
        lambda: _on_loop_unless_busy(gangs.state, gangs.filter, args.Pod, candidates))
    resolvable, unresolvable = ({}, outcome.failed) if outcome.unresolvable else (outcome.failed, {})
    answer = {"Nodes": None, "NodeNames": outcome.nodes, "FailedNodes": resolvable,
              "FailedAndUnresolvableNodes": unresolvable, "Error": outcome.error}
    if args.Nodes is not None:
        passing = set(outcome.nodes)
        answer["Nodes"] = {"metadata": args.Nodes.metadata or {},
                           "items": [n for n in args.Nodes.items
                                     if (n.get("metadata") or {}).get("name") in passing]}
    return _json(answer)


async def _prioritize(request: Request, gangs: GangScheduler) -> Response:
    args = await parse_args(request)
    hosts = _candidates(args)
    scores = await _on_loop_unless_busy(gangs.state, gangs.prioritize, args.Pod, hosts)
    if isinstance(scores, int):
        return Response(uniform_scores(hosts, scores), media_type="application/json")
    return _json([{"Host": host, "Score": score} for host, score in zip(hosts, scores)])


def uniform_scores(hosts: list[str], score: int) -> bytes:
    """[{"Host": h, "Score": score}, ...] for every host, written from one orjson dump of the names
    (a node name is a DNS subdomain: no quote, backslash or comma; checked, else the slow way)."""
    names = orjson.dumps(hosts)
    if not hosts:
        return b"[]"
    if b"\\" in names or names.count(b'"') != 2 * len(hosts) or names.count(b",") != len(hosts) - 1:
        return orjson.dumps([{"Host": host, "Score": score} for host in hosts])
    tail = b',"Score":%d}' % score
    return b'[{"Host":' + names[1:-1].replace(b'","', b'"' + tail + b',{"Host":"') + tail + b"]"


async def _bind(request: Request, gangs: GangScheduler) -> Response:
    args: ExtenderBindingArgs = await parse(request, ExtenderBindingArgs)
    call = (args.PodNamespace, args.PodName, args.PodUID, args.Node)
    if getattr(gangs.writer, "blocking", True):     # an API round trip: keep it off the event loop
        error = await run_in_threadpool(gangs.bind, *call)
    else:
        error = gangs.bind(*call)
    return _json({"Error": error})


async def _preempt(request: Request, gangs: GangScheduler) -> Response:
    args: ExtenderPreemptionArgs = await parse(request, ExtenderPreemptionArgs)
    meta = {}
    if args.NodeNameToMetaVictims is not None:
        for node, victims in args.NodeNameToMetaVictims.items():
            meta[node] = {"Pods": [{"UID": p.UID} for p in victims.Pods or []],
                          "NumPDBViolations": victims.NumPDBViolations}
    elif args.NodeNameToVictims is not None:
        for node, victims in args.NodeNameToVictims.items():
            meta[node] = {"Pods": [{"UID": (p.get("metadata") or {}).get("uid", "")} for p in victims.Pods or []],
                          "NumPDBViolations": victims.NumPDBViolations}
    kept = await run_in_threadpool(gangs.preempt, args.Pod,
                                   {node: [p["UID"] for p in v["Pods"]] for node, v in meta.items()})
    return _json({"NodeNameToMetaVictims": {
        node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": meta[node]["NumPDBViolations"]}
        for node, uids in kept.items() if node in meta}})
