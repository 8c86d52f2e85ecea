"""The debug page: GET /ui serves one static page that draws the topologies, the gang plans and the
refusals from the read-only debug API (app/http/debug.py). No build step: page.html, page.css and page.js
are package data served as they are.

The page links its assets and the API with relative URLs (`ui/page.js`, `debug/plans`), so it also
works behind a path prefix such as `kubectl proxy`'s.
"""
from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, HTTPException
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ..query_errors import ClearParameterErrors

router = APIRouter(tags=["debug"], route_class=ClearParameterErrors)

PAGE = "page.html"
ASSETS = {"page.css": "text/css; charset=utf-8", "page.js": "text/javascript; charset=utf-8"}
NO_CACHE = {"Cache-Control": "no-cache"}     # a new version of the service serves a new page at once


def _read(name: str) -> bytes:
    return files(__package__).joinpath(name).read_bytes()


@router.get("/", include_in_schema=False)
def root() -> RedirectResponse:
    """A browser pointed at the service lands on the page (relative: works behind a path prefix)."""
    return RedirectResponse("ui", status_code=307)


@router.get("/ui", response_class=HTMLResponse, summary="The debug page: topologies, plans, refusals")
def page() -> HTMLResponse:
    return HTMLResponse(_read(PAGE), headers=NO_CACHE)


@router.get("/ui/{asset}", include_in_schema=False)
def asset(asset: str) -> Response:
    media_type = ASSETS.get(asset)
    if media_type is None:
        raise HTTPException(404, f"no asset {asset!r} under /ui; assets: {', '.join(sorted(ASSETS))}")
    return Response(_read(asset), media_type=media_type, headers=NO_CACHE)
