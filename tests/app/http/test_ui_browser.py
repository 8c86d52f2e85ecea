"""The debug page in a real headless Chromium (Debian's `chromium`), driven over the DevTools protocol.

The real app runs under uvicorn on 127.0.0.1 (standalone demo cluster); gangs are placed through the
extender endpoints first, then the page must render the racks, the nodes' GPU cells, the gangs, the
refusal, the selected gang's slots, an error banner while the API fails, and no console error.
Set TAS_UI_SCREENSHOT=path to also write the screenshot with a gang selected there (docs/ui.png:
`TAS_UI_SCREENSHOT=docs/ui.png python -m pytest tests/app/http/test_ui_browser.py`).
"""
from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
import websocket             # websocket-client, installed with the kubernetes client
from fastapi.responses import JSONResponse

from app.server import create_app
from app.settings import Settings
from topology.demo import demo_objects

from service_helpers import indexed_job, job_pods

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                "(apt-get install -y chromium; .ci/run installs it)")
LLAMA = indexed_job("llama", pods=8, gpus=4, segment=4)          # fits: two segments of 4 pods in one rack
HUGE = indexed_job("huge", pods=16, gpus=8, segment=None)        # refused: no block has 16 free nodes
BERT = indexed_job("bert", pods=12, gpus=2, segment=4, required="zone")   # segments small enough for one node
WAIT = 30.0


# ---- the service ---------------------------------------------------------------------------------

class Service:
    """The real app under uvicorn in a thread; `failing` makes every /debug call answer 503."""

    def __init__(self, objects: list[dict]):
        self.app = create_app(Settings(), objects=objects)
        self.failing = threading.Event()

        @self.app.middleware("http")
        async def fail_on_demand(request, call_next):
            if self.failing.is_set() and request.url.path.startswith("/debug/"):
                return JSONResponse({"detail": "injected failure"}, status_code=503)
            return await call_next(request)

        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + WAIT
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        self.http = httpx.Client(base_url=self.url, timeout=10)

    def stop(self) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(10)
        self.socket.close()

    def schedule(self, pod: dict, *, bind: bool = True) -> str | None:
        """filter (then bind the planned node), as kube-scheduler does with nodeCacheCapable: true."""
        names = list(self.app.state.service.cluster.node_names)
        pod = {**pod, "spec": {"schedulerName": "tas-scheduler", **pod.get("spec", {})}}
        assert self.http.post("/debug/objects", json=pod).status_code == 200       # as the watch would deliver it
        answer = self.http.post("/scheduler/filter", json={"Pod": pod, "Nodes": None, "NodeNames": names}).json()
        assert answer["Error"] == ""
        if not answer["NodeNames"] or not bind:
            return None
        node, meta = answer["NodeNames"][0], pod["metadata"]
        bound = self.http.post("/scheduler/bind", json={"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                                        "PodUID": meta["uid"], "Node": node}).json()
        assert bound["Error"] == ""
        return node


# ---- the browser (DevTools protocol over websocket-client) -----------------------------------------

class Browser:
    def __init__(self, tmp: Path):
        profile = tmp / "profile"
        self.log = (tmp / "chromium.log").open("w")
        self.process = subprocess.Popen(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--remote-debugging-port=0",
             "--window-size=1400,1000", "about:blank"],
            stdout=self.log, stderr=subprocess.STDOUT)
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + WAIT
        while not (port_file.exists() and port_file.read_text().strip()):
            assert self.process.poll() is None, f"chromium exited: {(tmp / 'chromium.log').read_text()[-2000:]}"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.05)
        port = port_file.read_text().split()[0]
        targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=WAIT, suppress_origin=True)
        self.calls = 0
        self.events: list[dict] = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1, mobile=False)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()

    def call(self, method: str, **params) -> dict:
        self.calls += 1
        ident = self.calls
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                assert "error" not in message, f"{method}: {message['error']}"
                return message["result"]
            self.events.append(message)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def open(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", url=url)

    def wait_for(self, expression: str, what: str):
        deadline = time.monotonic() + WAIT
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                text = self.evaluate("document.body && document.body.innerText")
                pytest.fail(f"timed out waiting for {what}; page text:\n{text}\nerrors: {self.errors()}")
            time.sleep(0.1)

    def errors(self) -> list[str]:
        """Uncaught exceptions, console.error/assert calls and error log entries so far."""
        self.evaluate("0")                      # drain the events sent before now
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.append(details.get("exception", {}).get("description") or details.get("text", ""))
            elif method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
                found.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(f"{params['entry']['text']} {params['entry'].get('url', '')}")
        return found

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))


# ---- fixtures ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def service():
    service = Service([*copy.deepcopy(demo_objects()), LLAMA, HUGE, BERT])
    for i, pod in enumerate(job_pods(LLAMA)):
        service.schedule(pod, bind=i < 3)        # 3 pods bound, 5 slots still reserved
    service.schedule(job_pods(HUGE)[0])          # refused
    for pod in job_pods(BERT):
        service.schedule(pod)                    # every pod bound
    yield service
    service.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    browser = Browser(tmp_path_factory.mktemp("chromium"))
    yield browser
    browser.close()


def loaded(browser: Browser, url: str) -> None:
    browser.open(url)
    browser.wait_for("document.querySelector('#updated') && "
                     "document.querySelector('#updated').textContent !== 'never'", "the first refresh")


def click_search_hit(browser: Browser, text: str, hit: str) -> None:
    """Search for `text` in the page's search box and click the first hit of class `hit` (node-hit, ...)."""
    browser.evaluate(f"document.getElementById('search').value = {json.dumps(text)};"
                     "document.getElementById('search-form').requestSubmit()")
    browser.wait_for(f"!!document.querySelector('.{hit}')", f"a {hit} for {text}")
    browser.evaluate(f"document.querySelector('.{hit}').click()")


def node_cells_js() -> str:
    return """Object.fromEntries([...document.querySelectorAll('[data-node]')].map((n) => [n.dataset.node,
        Object.fromEntries(['used', 'reserved', 'free'].map((k) => [k, n.querySelectorAll('.cell.' + k).length]))]))"""


def api_node_figures(service: Service) -> dict[str, dict[str, int]]:
    tree = service.http.get("/debug/topology/default", params={"resource": "nvidia.com/gpu"}).json()
    figures = {}

    def walk(domain):
        for child in domain.get("children", []):
            walk(child)
        for node in domain.get("nodes", []):
            figures[node["node"]] = {k: node[k]["nvidia.com/gpu"] for k in ("used", "reserved", "free")}
    for root in tree["domains"]:
        walk(root)
    return figures


# ---- tests ------------------------------------------------------------------------------------------

def test_page_shows_racks_nodes_and_gangs_without_console_errors(service, browser, tmp_path):
    loaded(browser, f"{service.url}/ui")
    text = browser.evaluate("document.body.innerText")
    racks = [f"{block}-rack-{i}" for block in ("a-block-1", "a-block-2", "b-block-1", "b-block-2") for i in (1, 2)]
    racks.append("b-block-3-rack-1")           # the DRA rack
    for name in ["zone-a", "zone-b", *racks, "node-01", "node-32", "node-36", "pg-llama-uid-llama", "pg-huge-uid-huge",
                 "pg-bert-uid-bert"]:
        assert name in text, name
    refusal = service.http.get("/debug/plans/team-a/pg-huge-uid-huge").json()["reason"]
    card = browser.evaluate("document.querySelector('[data-gang=\"team-a/pg-huge-uid-huge\"] .reason').textContent")
    assert refusal and refusal in card                                # the refusal reason, verbatim (folded)
    assert browser.evaluate(node_cells_js()) == api_node_figures(service)   # one cell per GPU, by state
    assert browser.errors() == []
    browser.screenshot(tmp_path / "ui.png")
    assert (tmp_path / "ui.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("gang", ["team-a/pg-llama-uid-llama", "team-a/pg-bert-uid-bert"])
def test_selecting_a_gang_highlights_its_slots_and_domains(service, browser, gang):
    loaded(browser, f"{service.url}/ui")
    browser.evaluate(f"document.querySelector('[data-gang=\"{gang}\"] .gang-head').click()")
    browser.wait_for("document.querySelectorAll('.node.in-plan').length > 0", "the gang's nodes highlighted")
    plan = service.http.get(f"/debug/plans/{gang}").json()
    expected: dict[str, list[str]] = {}
    for slot in plan["slots"]:
        expected.setdefault(slot["node"], []).append(slot["slot"])
    shown = browser.evaluate("""Object.fromEntries([...document.querySelectorAll('.node.in-plan')].map((n) =>
        [n.dataset.node, [...n.querySelectorAll('.slot')].map((s) => s.textContent)]))""")
    assert shown == expected
    bound = browser.evaluate("[...document.querySelectorAll('.node .slot.bound')].map((s) => s.textContent)")
    assert sorted(bound) == sorted(s["slot"] for s in plan["slots"] if s["status"] == "bound")
    highlighted = browser.evaluate("[...document.querySelectorAll('.domain.in-plan, .node.domain-in-plan')]"
                                   ".map((d) => [d.dataset.domain, d.dataset.node])")
    domains = {g["domain"] for g in plan["groups"] if g["domain"]}      # a group on one node: the node's name
    assert all(domains & set(keys) for keys in highlighted)
    assert all(any(domain in keys for keys in highlighted) for domain in domains)
    colours = browser.evaluate("""Object.fromEntries([...document.querySelectorAll('.node .slot')].map((s) =>
        [s.textContent, s.style.getPropertyValue('--segment')]))""")
    by_segment: dict[str, set[str]] = {}
    for slot in plan["slots"]:
        by_segment.setdefault(slot["group"], set()).add(colours[slot["slot"]])
    assert all(len(c) == 1 for c in by_segment.values())               # one colour per segment ...
    assert len(set().union(*by_segment.values())) == len(by_segment)   # ... and a different one for each
    assert "gang=" + gang.replace("/", "%2F") in browser.evaluate("location.hash")
    assert browser.errors() == []
    if os.environ.get("TAS_UI_SCREENSHOT") and "llama" in gang:
        browser.screenshot(Path(os.environ["TAS_UI_SCREENSHOT"]))


def test_tabs_switch_topology_and_resource(service, browser):
    loaded(browser, f"{service.url}/ui")
    browser.evaluate("[...document.querySelectorAll('.tab')].find((t) => t.textContent.startsWith('kueue-default'))"
                     ".click()")
    browser.wait_for("document.querySelector('.tab.active').textContent.startsWith('kueue-default')", "the tab")
    browser.wait_for("document.querySelector('.level').textContent === 'block'", "kueue-default's levels")
    select = "const s = document.querySelector('#resource'); s.value = 'cpu'; s.dispatchEvent(new Event('change'))"
    browser.evaluate(select)
    nodes = service.http.get("/debug/topology").json()["topologies"][1]["nodes"]
    browser.wait_for(f"document.querySelectorAll('.node .bar').length === {nodes}", "a cpu bar on every node")
    assert browser.evaluate("document.querySelectorAll('.node .cell').length") == 0
    assert browser.evaluate("location.hash") == "#topology=kueue-default&resource=cpu"
    text = browser.evaluate("document.body.innerText")
    assert "a-block-2-rack-1" in text and "levels: network.example.com/block" in text
    assert browser.errors() == []


def test_api_failure_shows_a_banner_and_the_page_recovers(service, browser):
    loaded(browser, f"{service.url}/ui?refresh=0.5")
    nodes = browser.evaluate("document.querySelectorAll('[data-node]').length")
    try:
        service.failing.set()
        browser.wait_for("!document.querySelector('#banner').hidden", "the error banner")
        banner = browser.evaluate("document.querySelector('#banner').textContent")
        assert "HTTP 503" in banner and "injected failure" in banner and "retrying" in banner
        assert browser.evaluate("document.querySelectorAll('[data-node]').length") == nodes   # last data kept
    finally:
        service.failing.clear()
    browser.wait_for("document.querySelector('#banner').hidden", "the banner to go once the API answers")
    uncaught = [e for e in browser.errors() if "503" not in e]       # the failed fetches log 503s, nothing else
    assert uncaught == []


def test_empty_cluster_shows_empty_states(browser):
    empty = Service([])
    try:
        loaded(browser, f"{empty.url}/ui")
        text = browser.evaluate("document.body.innerText")
        assert "No gangs yet" in text and "No topology known" in text
        assert browser.errors() == []
    finally:
        empty.stop()



def test_counts_say_what_they_count_and_gangs_show_the_workload_name(service, browser):
    """Issue 16 item 2: usable free capacity apart from what NotReady / tainted nodes hold, gang counts
    labelled as gangs, pod counts as pods, and each gang card named by the workload the user submitted."""
    loaded(browser, f"{service.url}/ui")
    text = browser.evaluate("document.body.innerText")
    totals = service.http.get("/debug/topology/default", params={"resource": "nvidia.com/gpu"}).json()["totals"]
    assert totals["unusable"]["nvidia.com/gpu"] == 16                     # node-16 NotReady, node-24 tainted
    assert (f"{totals['free']['nvidia.com/gpu']} usable free of {totals['allocatable']['nvidia.com/gpu']} "
            "(+16 on NotReady, cordoned or tainted nodes)") in text
    counts = browser.evaluate("[...document.querySelectorAll('.count')].map((c) => c.textContent)")
    assert any(c.endswith("gangs bound") or c.endswith("gang bound") for c in counts), counts
    llama = "[data-gang=\"team-a/pg-llama-uid-llama\"]"
    assert browser.evaluate(f"document.querySelector('{llama} .gang-name').textContent") == "llama"
    assert browser.evaluate(f"document.querySelector('{llama} .pods').textContent") == \
        "pods: 3 bound · 5 planned · 0 unplaced"


@pytest.mark.parametrize("link", ["team-a%2Fllama", "team-a%2Fpg-llama-uid-llama"])
def test_a_link_naming_the_workload_or_the_gang_selects_it(service, browser, link):
    """docs/ui.md's deep link `/ui#gang=team-a%2Fllama` names the workload; the gang's own key works too."""
    browser.open("about:blank")                     # a new document: the page reads the hash when it loads
    browser.wait_for("location.href === 'about:blank'", "a blank page")
    loaded(browser, f"{service.url}/ui#gang={link}")
    browser.wait_for("document.querySelectorAll('.node.in-plan').length > 0", "the gang's nodes highlighted")
    selected = browser.evaluate("[...document.querySelectorAll('.gang.selected')].map((g) => g.dataset.gang)")
    assert selected == ["team-a/pg-llama-uid-llama"]
    assert browser.evaluate("location.hash").startswith("#gang=team-a%2Fpg-llama-uid-llama")
    assert browser.errors() == []


def test_a_gang_kube_scheduler_refused_itself_has_a_card_with_the_what_if_button(browser):
    """Defect: a gang whose pods kube-scheduler refused in its own filters (the extender never planned it)
    got the what-if advice but no card. Its card shows kube-scheduler's message, asks the advice on a click,
    and selecting it asks for no plan that does not exist."""
    giant = indexed_job("giant", pods=4, gpus=8, segment=None)
    service = Service([*copy.deepcopy(demo_objects()), giant])
    try:
        pod = job_pods(giant)[0]
        pod["spec"]["schedulerName"] = "tas-scheduler"
        pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                         "reason": "Unschedulable", "message": "0/32 nodes are available: 32 Insufficient cpu."}]}
        assert service.http.post("/debug/objects", json=pod).status_code == 200
        (entry,) = service.http.get("/debug/plans").json()["unplanned"]
        card = f"[data-gang=\"{entry['gang']}\"]"
        loaded(browser, f"{service.url}/ui")
        browser.wait_for(f"!!document.querySelector('{card} .badge.unplanned')", "the unplanned gang's card")
        assert "32 Insufficient cpu" in browser.evaluate(f"document.querySelector('{card} .reason').textContent")
        assert browser.evaluate(f"document.querySelector('{card} .pods').textContent") == "pods: 1 pending"
        browser.evaluate(f"document.querySelector('{card} button.ask').click()")
        browser.wait_for(f"!!document.querySelector('{card} .advice:not(.asking)')", "the what-if advice")
        assert "What would make it fit" in browser.evaluate(f"document.querySelector('{card} .advice').textContent")
        browser.evaluate(f"document.querySelector('{card} .gang-head').click()")
        browser.wait_for(f"!!document.querySelector('{card}.selected')", "the card selected")
        time.sleep(0.5)
        assert browser.evaluate("document.querySelector('#banner').hidden")
        assert browser.errors() == []
    finally:
        service.stop()
