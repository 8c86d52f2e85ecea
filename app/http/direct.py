"""The calls on kube-scheduler's loop, straight from uvicorn to their endpoint.

The extender verbs and the webhook are called once or more for every pod the cluster creates and
schedules. Through FastAPI each call also passes its exception, telemetry, body-limit and exit-stack
middlewares and a router that matches the path against every debug and page route; for a call that
itself takes a fraction of a millisecond that costs as much as the work. `DirectRoutes` (a middleware
added last, so it runs first after Starlette's ServerErrorMiddleware, which still turns an unexpected
exception into HTTP 500) answers a POST to one of its paths by calling the endpoint itself; every other
request goes on through the app. The endpoints are the routes' own functions, so the answers are the same
(issue 31).

A caller that goes away before its body has arrived (or whose connection --request-timeout closed) has
nobody to answer: that ends the request quietly, not as an internal error with a traceback (issue 40).
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from ..logs import fields, get_logger

log = get_logger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]


class DirectRoutes:
    def __init__(self, app, routes: Mapping[str, Endpoint]):
        self.app = app
        self.routes = dict(routes)

    async def __call__(self, scope, receive, send) -> None:
        try:
            if scope["type"] == "http" and scope["method"] == "POST":
                endpoint = self.routes.get(scope["path"])
                if endpoint is not None:
                    response = await endpoint(Request(scope, receive, send))
                    await response(scope, receive, send)
                    return
            await self.app(scope, receive, send)
        except ClientDisconnect:
            log.debug("the caller left before its request had arrived", extra=fields(path=scope.get("path")))
