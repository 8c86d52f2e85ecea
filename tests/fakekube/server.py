"""The fake API server's HTTP layer: the real REST paths and JSON shapes, enough for the official client.

    /api/v1/{plural}[/{name}]                               cluster-scoped, or every namespace for a list
    /api/v1/namespaces/{ns}/{plural}[/{name}[/{sub}]]       namespaced (sub: binding, eviction for pods)
    /apis/{group}/{version}/...                             the same for every other group

GET on a collection lists (`limit`/`continue` paginate) or, with `watch=1`, streams newline-delimited
watch events from `resourceVersion`. Unknown group/versions answer a plain "404 page not found";
failures are metav1.Status bodies with the real codes and reasons.
"""
from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .store import ApiError, FakeKube, Resource, status_body

WATCH_POLL_SECONDS = 0.01
INJECTED_REASONS = {409: "Conflict", 410: "Expired", 429: "TooManyRequests", 503: "ServiceUnavailable"}
MERGE_PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


@dataclass
class Target:
    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str | None


class GroupVersionNotServed(Exception):
    pass


def parse_path(fake: FakeKube, path: str) -> Target:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise GroupVersionNotServed(path)
    if not fake.serves_group_version(group, version) or not rest:
        raise GroupVersionNotServed(path)
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    plural, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
    resource = fake.resource(group, version, plural)
    if resource is None or len(rest) > 3 or (namespace is not None and not resource.namespaced) \
            or (namespace is None and name is not None and resource.namespaced):
        raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
    return Target(resource, namespace, name, sub)


def json_response(body: dict, code: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=code, media_type="application/json")


def build_app(fake: FakeKube) -> Starlette:
    async def dispatch(request: Request) -> Response:
        fake.requests.append((request.method, request.url.path))
        if "authorization" in request.headers:
            fake.authorizations.add(request.headers["authorization"])
        injected = fake.take_fault(request.method, request.url.path)
        if injected is not None:
            reason = INJECTED_REASONS.get(injected, "InternalError")
            return json_response(status_body(injected, reason, f"injected {reason}"), injected)
        try:
            target = parse_path(fake, request.url.path)
            return await handle(fake, request, target)
        except GroupVersionNotServed:
            return PlainTextResponse("404 page not found\n", status_code=404)
        except ApiError as error:
            return json_response(error.status(), error.code)

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(routes=[Route("/{path:path}", dispatch, methods=methods)])


async def read_json(request: Request) -> dict:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as error:
        raise ApiError(400, "BadRequest", f"the request body is not JSON: {error}") from error
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the request body must be a JSON object")
    return body


async def handle(fake: FakeKube, request: Request, target: Target) -> Response:
    resource, namespace, name, sub = target.resource, target.namespace, target.name, target.subresource
    method = request.method
    if sub is not None:
        return await handle_pod_subresource(fake, request, target)
    if name is None:
        if method == "GET" and request.query_params.get("watch") in ("1", "true"):
            return watch_response(fake, request, target)
        if method == "GET":
            return list_response(fake, request, target)
        if method == "POST":
            body = await read_json(request)
            if namespace is not None:
                body.setdefault("metadata", {})["namespace"] = namespace
            return json_response(fake.create(body, resource), 201)
    elif method == "GET":
        return json_response(fake.read(resource, namespace, name))
    elif method == "PUT":
        body = await read_json(request)
        metadata = body.setdefault("metadata", {})
        if metadata.get("name", name) != name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        metadata["name"] = name
        if namespace is not None:
            metadata["namespace"] = namespace
        return json_response(fake.replace(body, resource))
    elif method == "PATCH":
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        if content_type not in MERGE_PATCH_TYPES:
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                                                        f"accepted media types include: {', '.join(MERGE_PATCH_TYPES)}")
        return json_response(fake.patch(resource, namespace, name, await read_json(request)))
    elif method == "DELETE":
        return json_response(fake.delete(resource, namespace, name))
    raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


async def handle_pod_subresource(fake: FakeKube, request: Request, target: Target) -> Response:
    if target.resource.kind != "Pod" or request.method != "POST" or target.subresource not in ("binding", "eviction"):
        raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
    body = await read_json(request)
    if target.subresource == "binding":
        fake.bind(target.namespace, target.name, body)
    else:
        fake.evict(target.namespace, target.name, body)
    return json_response(status_body(201), 201)


def list_response(fake: FakeKube, request: Request, target: Target) -> Response:
    resource = target.resource
    limit = int(request.query_params.get("limit") or 0)
    token = request.query_params.get("continue")
    rv, items = fake.list(resource, target.namespace)
    offset = 0
    if token:
        token_rv, offset = (int(part) for part in token.split(":"))
        if token_rv < fake.compacted_resource_version:
            raise ApiError(410, "Expired", "The provided continue parameter is too old to display a consistent "
                                           "list result. You can start a new list without the continue parameter.")
        rv = token_rv
    page = items[offset:offset + limit] if limit else items[offset:]
    metadata: dict = {"resourceVersion": str(rv)}
    if limit and offset + limit < len(items):
        metadata["continue"] = f"{rv}:{offset + limit}"
    if resource.builtin:
        for item in page:
            item.pop("apiVersion", None)
            item.pop("kind", None)
    return json_response({"kind": f"{resource.kind}List", "apiVersion": resource.api_version,
                          "metadata": metadata, "items": page})


def watch_response(fake: FakeKube, request: Request, target: Target) -> Response:
    start = request.query_params.get("resourceVersion")
    timeout = float(request.query_params.get("timeoutSeconds") or 1800)
    bookmarks = request.query_params.get("allowWatchBookmarks") in ("1", "true")
    try:
        position = int(start) if start else 0
    except ValueError:
        raise ApiError(400, "BadRequest", f"invalid resourceVersion {start!r}") from None
    return StreamingResponse(watch_stream(fake, target, position, timeout, bookmarks), media_type="application/json")


def event_line(type_: str, obj: dict) -> bytes:
    return orjson.dumps({"type": type_, "object": obj}) + b"\n"


async def watch_stream(fake: FakeKube, target: Target, position: int, timeout: float,
                       bookmarks: bool) -> AsyncIterator[bytes]:
    resource, epoch = target.resource, fake.expired_epoch
    deadline = time.monotonic() + timeout
    if position == 0:          # no resourceVersion (or "0"): synthetic ADDED events for the current state first
        position, items = fake.list(resource, target.namespace)
        for item in items:
            yield event_line("ADDED", item)
    group_version_plural = (resource.group, resource.version, resource.plural)
    while not fake.closed and fake.resource(*group_version_plural) is resource:
        if fake.expired_epoch != epoch:
            yield event_line("ERROR", status_body(410, "Expired", "too old resource version: watch expired"))
            return
        seen_up_to = fake.resource_version
        try:
            events = fake.events_since(resource, target.namespace, position)
        except ApiError as error:
            yield event_line("ERROR", error.status())
            return
        for event in events:
            yield event_line(event.type, event.obj)
        position = max([position, seen_up_to] + [e.rv for e in events])
        if time.monotonic() >= deadline:
            if bookmarks:
                yield event_line("BOOKMARK", {"kind": resource.kind, "apiVersion": resource.api_version,
                                              "metadata": {"resourceVersion": str(position)}})
            return
        await asyncio.sleep(WATCH_POLL_SECONDS)


@contextlib.contextmanager
def serve(fake: FakeKube) -> Iterator[str]:
    """Run the fake API server on 127.0.0.1 and a free port in a background thread; yields its URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(build_app(fake), log_level="warning", lifespan="off", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="fakekube", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the fake Kubernetes API server did not start")
        time.sleep(0.01)
    fake.url = f"http://127.0.0.1:{port}"
    try:
        yield fake.url
    finally:
        fake.close()
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
