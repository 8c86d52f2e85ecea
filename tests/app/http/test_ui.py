"""The debug page over plain HTTP: /ui and its assets, and that the page only uses what exists (assets,
element ids, debug API routes and fields). The page itself runs in Chromium in test_ui_browser.py."""
from __future__ import annotations

import paths
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

from service_helpers import domain_of, filter_, indexed_job, job_pods, make_client, schedule

UI = paths.ROOT / "app" / "http" / "ui"
PAGE_JS = (UI / "page.js").read_text()
CONTENT_TYPES = {".css": "text/css", ".js": "text/javascript"}


class References(HTMLParser):
    """The URLs a page loads (script src, link href) and its element ids."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        url = attrs.get("src") if tag == "script" else attrs.get("href") if tag == "link" else None
        if url and not url.startswith("data:"):
            self.urls.append(url)


def page_references(client) -> References:
    parser = References()
    parser.feed(client.get("/ui").text)
    return parser


@pytest.fixture(scope="module")
def client():
    return make_client()


def test_ui_serves_the_page_uncached(client):
    response = client.get("/ui")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["cache-control"] == "no-cache"
    assert "<title>tas-extender" in response.text


def test_every_asset_the_page_references_is_served_with_its_type(client):
    urls = page_references(client).urls
    assert len(urls) == 2, urls                                  # page.css and page.js
    for url in urls:
        assert not urlsplit(url).netloc and not url.startswith("/"), f"{url} must be relative (path prefixes)"
        path = urlsplit(urljoin("http://testserver/ui", url)).path
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"].startswith(CONTENT_TYPES[Path(path).suffix]), path
        assert response.content == (UI / Path(path).name).read_bytes()


@pytest.mark.parametrize("asset", ["page.html", "__init__.py", "nope.js", "..%2F__init__.py"])
def test_unknown_assets_are_404_naming_the_assets(client, asset):
    response = client.get(f"/ui/{asset}")
    assert response.status_code == 404
    if "%2F" not in asset:
        assert "page.css, page.js" in response.json()["detail"]


def test_every_element_the_script_looks_up_is_on_the_page(client):
    looked_up = set(re.findall(r'(?:getElementById|fill)\("([\w-]+)"', PAGE_JS))
    assert {"gangs", "tree", "banner", "updated"} <= looked_up
    assert looked_up <= page_references(client).ids


def test_every_api_path_the_script_fetches_is_a_route(client):
    fetched = set(re.findall(r'getJSON\([`"]([\w/]+)', PAGE_JS))
    assert fetched == {"debug/plans", "debug/topology", "debug/topology/", "debug/plans/", "debug/search"}
    routes = set(client.get("/openapi.json").json()["paths"])
    for path in fetched:
        pattern = re.compile("^/" + re.escape(path) + (r"\{" if path.endswith("/") else "$"))
        assert any(pattern.match(route) for route in routes), f"{path} is not served: {sorted(routes)}"


def test_plan_detail_names_the_segment_of_every_slot():
    """The page colours slots by segment: /debug/plans/{ns}/{name} gives each slot its leaf group."""
    job = indexed_job("llama", pods=8, gpus=4, segment=4)
    client = make_client(job)
    pods = job_pods(job)
    schedule(client, pods[0])
    detail = client.get("/debug/plans/team-a/pg-llama-uid-llama").json()
    segments = {slot["slot"]: slot["group"] for slot in detail["slots"]}
    leaves = {g["group"] for g in detail["groups"]} & set(segments.values())
    assert len(leaves) == 2
    first, second = (segments[f"job-{i}"] for i in (0, 4))
    assert first != second
    assert [segments[f"job-{i}"] for i in range(8)] == [first] * 4 + [second] * 4
    domains = {g["group"]: g["domain"] for g in detail["groups"]}
    for slot in detail["slots"]:                 # a segment's slots sit in the rack its group is confined to
        assert domain_of(client, slot["node"], "rack") == domains[slot["group"]]


def test_plan_detail_of_an_unsegmented_gang_puts_every_slot_in_one_group():
    job = indexed_job("flat", pods=3, gpus=2, segment=None)
    client = make_client(job)
    filter_(client, job_pods(job)[0])
    slots = client.get("/debug/plans/team-a/pg-flat-uid-flat").json()["slots"]
    assert len(slots) == 3 and len({s["group"] for s in slots}) == 1 and slots[0]["group"]
