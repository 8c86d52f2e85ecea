"""Issue 34 part 2: the page shows fragmentation, in headless Chromium, on the demo cluster (32 nodes)
and a generated 16,384-node cluster: domains coloured by whole free nodes with a legend, placed gangs
tagged on their domains without a click, a refused gang's closest domains and what each lacks, the
what-if advice on a click, long refusals folded, and a refresh interval below 1 s clamped. Screenshots
go to the test's tmp directory (and to $TAS_UI_SHOTS when set). First-render time: benchmarks/bench_ui.py."""
from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest

from service_helpers import indexed_job, job_pods
from test_ui_browser import BERT, CHROMIUM, HUGE, LLAMA, Service, browser, loaded  # noqa: F401 - a fixture
from topology.demo import demo_objects

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from synth import synth_cluster_objects  # noqa: E402

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
HUGE_CARD = '[data-gang="team-a/pg-huge-uid-huge"]'


def shot(browser, tmp_path: Path, name: str) -> Path:
    folder = Path(os.environ.get("TAS_UI_SHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    browser.screenshot(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path


@pytest.fixture(scope="module")
def demo():
    service = Service([*copy.deepcopy(demo_objects()), LLAMA, HUGE, BERT])
    for i, pod in enumerate(job_pods(LLAMA)):
        service.schedule(pod, bind=i < 3)
    service.schedule(job_pods(HUGE)[0])          # refused
    for pod in job_pods(BERT):
        service.schedule(pod)
    yield service
    service.stop()


def whole_by_domain(service, topology="default") -> dict[str, str]:
    tree = service.http.get(f"/debug/topology/{topology}").json()
    found = {}

    def walk(domain):
        nodes = domain.get("nodes") or []
        if len(nodes) == 1 and nodes[0]["node"] == domain["value"]:
            return                                    # a host level: drawn as the node itself
        found[domain["id"]] = f"{domain['whole']['free_nodes']}/{domain['whole']['nodes']}"
        for child in domain.get("children", []):
            walk(child)
    for root in tree["domains"]:
        walk(root)
    return found


def test_domains_show_whole_free_nodes_and_placed_gangs_without_a_click(demo, browser, tmp_path):
    loaded(browser, f"{demo.url}/ui")
    shown = browser.evaluate("Object.fromEntries([...document.querySelectorAll('.domain[data-whole]')]"
                             ".map((d) => [d.dataset.domain, d.dataset.whole]))")
    assert shown == whole_by_domain(demo)
    assert shown["zone-a/a-block-1/a-block-1-rack-2"] == "4/4"          # an empty rack: all whole free
    text = browser.evaluate("document.body.innerText")
    assert "whole free nodes: none → all" in text                        # the legend
    # llama (planned in one rack) and bert (bound, zone) are tagged on their domains, nothing selected
    tags = browser.evaluate("Object.fromEntries([...document.querySelectorAll('.domain')].map((d) => [d.dataset.domain,"
                            "[...d.querySelectorAll(':scope > .gang-tags .gang-tag')].map((t) => t.textContent)]))")
    plans = {p["workload"]: p for p in demo.http.get("/debug/plans").json()["plans"]}
    for name in ("llama", "bert"):
        confined = {g["domain"] for g in plans[name]["groups"] if g["domain"] and g["level"] != "node"}
        assert confined and all(name in tags[d] for d in confined), (name, confined, tags)
    assert not browser.evaluate("location.hash.includes('gang=')")
    assert browser.errors() == []
    shot(browser, tmp_path, "ui-demo-fragmentation.png")


def test_a_refused_gang_folds_its_reason_and_tells_the_closest_domains_and_the_advice(demo, browser, tmp_path):
    loaded(browser, f"{demo.url}/ui")
    reason = demo.http.get("/debug/plans/team-a/pg-huge-uid-huge").json()["reason"]
    assert len(reason) > 180
    assert browser.evaluate(f"document.querySelector('{HUGE_CARD} details.reason').open") is False
    assert reason not in browser.evaluate(f"document.querySelector('{HUGE_CARD}').innerText")
    browser.evaluate(f"document.querySelector('{HUGE_CARD} details.reason summary').click()")
    assert reason in browser.evaluate(f"document.querySelector('{HUGE_CARD}').innerText")
    browser.evaluate(f"document.querySelector('{HUGE_CARD} .gang-head').click()")
    browser.wait_for(f"document.querySelectorAll('{HUGE_CARD} [data-closest]').length === 3", "the closest domains")
    closest = demo.http.get("/debug/plans/team-a/pg-huge-uid-huge").json()["closest"]
    shown = browser.evaluate(f"[...document.querySelectorAll('{HUGE_CARD} [data-closest]')].map((c) => c.textContent)")
    assert shown == [c["text"] for c in closest]
    assert shown[0].startswith("a-block-1: 6 of 16 pods fit; 6 of 8 nodes whole free; 4 nvidia.com/gpu held by ")
    browser.evaluate(f"document.querySelector('{HUGE_CARD} .ask').click()")
    browser.wait_for(f"!!document.querySelector('{HUGE_CARD} .advice:not(.asking)')", "the what-if advice")
    advice = browser.evaluate(f"document.querySelector('{HUGE_CARD} .advice').textContent")
    assert advice.startswith("What would make it fit: ") and "only more nodes" in advice
    assert browser.errors() == []
    shot(browser, tmp_path, "ui-demo-refused.png")


def test_a_refresh_below_one_second_is_clamped(demo, browser):
    loaded(browser, f"{demo.url}/ui?refresh=0.1")
    assert "refresh clamped to 1 s" in browser.evaluate("document.querySelector('#updated').textContent")
    calls = browser.evaluate("""new Promise((done) => {
        const before = performance.getEntriesByType('resource').filter((e) => e.name.endsWith('/debug/plans')).length;
        setTimeout(() => done(performance.getEntriesByType('resource')
          .filter((e) => e.name.endsWith('/debug/plans')).length - before), 2500); })""")
    assert calls <= 3                             # 0.1 s would be ~25 refreshes in 2.5 s


@pytest.fixture(scope="module")
def fleet16k():
    wide = indexed_job("wide", pods=32, gpus=8, segment=None, required="block")
    service = Service([*synth_cluster_objects(16_384), wide])
    service.schedule(job_pods(wide)[0], bind=False)
    yield service
    service.stop()


def test_at_16k_nodes_the_overview_colours_by_whole_free_nodes_and_marks_the_gang(fleet16k, browser, tmp_path):
    loaded(browser, f"{fleet16k.url}/ui")
    cells = browser.evaluate("[...document.querySelectorAll('.heat')].map((h) => [h.dataset.child, "
                             "h.style.getPropertyValue('--share'), h.classList.contains('has-gang')])")
    assert len(cells) == 1024                                  # 64 blocks x 16 racks
    plan = fleet16k.http.get("/debug/plans").json()["plans"][0]
    block = next(g["domain"] for g in plan["groups"] if g["level"] == "block")
    in_block = [c for c in cells if c[0].startswith(block + "/")]
    assert len(in_block) == 16
    # the gang's 32 nodes are reserved in its block: its racks are no longer all whole, every other one is
    assert any(float(c[1]) < 1 for c in in_block)
    assert all(float(c[1]) == 1 for c in cells if not c[0].startswith(block + "/"))
    tags = browser.evaluate(f"[...document.querySelectorAll('[data-domain=\"{block}\"] .gang-tag')].map((t) => t.textContent)")
    assert tags == ["wide"]
    assert browser.errors() == []
    shot(browser, tmp_path, "ui-16k-overview.png")
