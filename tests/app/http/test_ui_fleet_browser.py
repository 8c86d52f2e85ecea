"""Issue 16 item 1: the page at fleet size, in headless Chromium. A 4,096-node topology opens as an
overview (zones, then blocks as heat strips of their racks), expands on click, finds a node by name and
brings it into view, and brings a selected gang's domains into view. The timing is in
benchmarks/bench_ui.py, not here."""
from __future__ import annotations

import paths
import sys
from pathlib import Path

import pytest

from service_helpers import indexed_job, job_pods
from test_ui_browser import CHROMIUM, Service, browser, click_search_hit, loaded  # noqa: F401 - browser is a fixture

sys.path.insert(0, str(paths.BENCHMARKS))
from synth import synth_cluster_objects  # noqa: E402

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
WIDE = indexed_job("wide", pods=16, gpus=8, segment=None, required="block")
IN_VIEW = """((e) => { const r = e.getBoundingClientRect();
                       return r.bottom > 0 && r.top < window.innerHeight; })"""


@pytest.fixture(scope="module")
def fleet():
    service = Service([*synth_cluster_objects(4096), WIDE])
    service.schedule(job_pods(WIDE)[0], bind=False)          # a planned gang in one block
    yield service
    service.stop()


def test_a_large_topology_opens_as_an_overview_of_heat_strips(fleet, browser):
    loaded(browser, f"{fleet.url}/ui")
    assert browser.evaluate("document.querySelectorAll('[data-node]').length") == 0
    assert browser.evaluate("document.querySelectorAll('.domain.collapsed').length") == 16       # the blocks
    assert browser.evaluate("document.querySelectorAll('.heat').length") == 256                  # their racks
    assert browser.evaluate("document.getElementsByTagName('*').length") < 3000
    assert browser.errors() == []


def test_a_click_expands_a_block_then_a_rack(fleet, browser):
    loaded(browser, f"{fleet.url}/ui")
    block = browser.evaluate("document.querySelector('.domain.collapsed').dataset.domain")
    browser.evaluate(f"document.querySelector('[data-domain=\"{block}\"] .opener').click()")
    browser.wait_for(f"document.querySelectorAll('[data-domain=\"{block}\"] .domain.collapsed').length === 16",
                     "the block's 16 racks")
    rack = browser.evaluate(f"document.querySelector('[data-domain=\"{block}\"] .domain.collapsed').dataset.domain")
    browser.evaluate(f"document.querySelector('[data-domain=\"{rack}\"] .opener').click()")
    browser.wait_for(f"document.querySelectorAll('[data-domain=\"{rack}\"] [data-node]').length === 16",
                     "the rack's 16 nodes")


def test_search_finds_a_node_and_brings_it_into_view(fleet, browser):
    loaded(browser, f"{fleet.url}/ui")
    click_search_hit(browser, "node-003999", "node-hit")
    browser.wait_for("!!document.querySelector('[data-node=\"node-003999\"].found')", "the node, marked")
    assert browser.evaluate(f"{IN_VIEW}(document.querySelector('[data-node=\"node-003999\"]'))")


def test_selecting_a_gang_opens_and_shows_its_domain(fleet, browser):
    loaded(browser, f"{fleet.url}/ui")
    gang = "team-a/pg-wide-uid-wide"
    browser.evaluate(f"document.querySelector('[data-gang=\"{gang}\"] .gang-head').click()")
    browser.wait_for("document.querySelectorAll('.node.in-plan').length === 16", "the gang's 16 nodes")
    assert browser.evaluate(f"{IN_VIEW}(document.querySelector('.domain.in-plan'))")
    assert browser.errors() == []
