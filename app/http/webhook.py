"""The mutating admission webhook: POST /mutate, admission.k8s.io/v1 AdmissionReview for Pod CREATE.

Answers:
- a valid review: HTTP 200, the request's uid echoed, `allowed` always set, a JSONPatch when the pod
  gets labels / env, a Status when denied, warnings for notes;
- a body that is not a valid review but names a uid: HTTP 200, allowed=false, status.code 400 with what
  is wrong (the API server shows this message to the client, which a non-200 answer would hide);
- a body without a recoverable uid: HTTP 400 (the API server rejects any answer without its uid
  anyway; this only happens with hand-made requests); a body over --max-request-bytes: HTTP 413.
An unexpected error answers HTTP 500, so the webhook's failurePolicy decides, as for a timeout.
"""
from __future__ import annotations

import logging
import time

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from ..logs import fields, get_logger
from ..webhook.admit import Context, Decision
from ..webhook.admit import admit as decide
from ..webhook.caches import OwnerWaits
from ..webhook.review import MalformedReview, build_response, parse_review
from ..wire import BodyTooLarge
from .body import read_limited

log = get_logger(__name__)
router = APIRouter(tags=["webhook"])


async def webhook_context(request: Request) -> Context:
    """The service state as the webhook reads it (app.state.service: objects, cluster, settings)."""
    app_state = request.app.state
    service = app_state.service
    waits = getattr(app_state, "webhook_owner_waits", None)
    if waits is None:
        waits = app_state.webhook_owner_waits = OwnerWaits()
    engine = getattr(app_state, "engine", None)
    unfit = engine.unfit.should_gate if engine is not None and engine.unfit.enabled else None
    return Context(service.objects, service.topologies, service.settings, waits, service.identities,
                   synced=getattr(service, "synced_once", True), gate=getattr(app_state, "native_gate", None),
                   unfit=unfit)


def _json(body: dict, status_code: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status_code, media_type="application/json")


@router.post("/mutate", summary="Mutating admission webhook for Pod CREATE (admission.k8s.io/v1)")
async def mutate(request: Request, context: Context = Depends(webhook_context)) -> Response:
    started = time.perf_counter()
    try:
        return await _mutate(request, context)
    finally:
        request.app.state.service.metrics.latency.labels("webhook").observe(time.perf_counter() - started)


async def mutate_direct(request: Request) -> Response:
    """`mutate` without FastAPI's dependency machinery (app.http.direct)."""
    return await mutate(request, await webhook_context(request))


async def _mutate(request: Request, context: Context) -> Response:
    try:
        body = await read_limited(request, request.app.state.service.settings.max_request_bytes)
    except BodyTooLarge as error:
        return _json(build_response("", allowed=False, message=str(error), code=413,
                                    reason="RequestEntityTooLarge"), 413)
    try:
        review = parse_review(body)
    except MalformedReview as error:
        answer = build_response(error.uid or "", allowed=False, message=str(error), code=400,
                                reason="BadRequest", api_version=error.api_version)
        return _json(answer, 200 if error.uid else 400)
    uid = review.request.uid
    try:
        decision = decide(review.request, context)
    except Exception:
        log.exception("webhook failed", extra=fields(uid=uid, namespace=review.request.namespace))
        return _json(build_response(uid, allowed=False, message="internal error in the tas-extender webhook",
                                    code=500, reason="InternalError"), 500)
    _log(review.request, decision)
    return _json(build_response(uid, allowed=decision.allowed, patch=decision.operations,
                                warnings=decision.warnings, message=decision.message, code=decision.code,
                                reason=decision.reason))


def _log(request, decision: Decision) -> None:
    """Denials and warnings at info; a plain mutation at debug (one per pod of every gang)."""
    quiet = decision.allowed and not decision.warnings
    if quiet and not (decision.operations and log.isEnabledFor(logging.DEBUG)):
        return
    metadata = (request.object or {}).get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    pod = f"{request.namespace}/{metadata.get('name') or metadata.get('generateName') or ''}"
    log.log(logging.DEBUG if quiet else logging.INFO, "admission denied" if not decision.allowed else "admission",
            extra=fields(pod=pod, uid=request.uid, allowed=decision.allowed, operations=len(decision.operations),
                         dry_run=request.dry_run, text=decision.message, warnings=decision.warnings or None))


__all__ = ["mutate_direct", "router", "webhook_context"]
