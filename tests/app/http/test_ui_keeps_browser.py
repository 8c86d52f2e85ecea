"""Issue 40 item 4, the page in headless Chromium: what the user opened (a folded refusal reason, the
scroll position, expanded domains) stays so across refreshes and a reload of the tab; the domain and the
victims the what-if advice names are marked on the tree; search finds domains; long names are shortened
with the full name on hover and never run off the page. At 32 nodes (the demo) and 16,384 (the fleet);
screenshots go to the test's tmp directory (and to $TAS_UI_SHOTS when set)."""
from __future__ import annotations

import copy

import pytest

from service_helpers import indexed_job, job_pods
from test_ui_browser import CHROMIUM, Service, browser, click_search_hit, loaded  # noqa: F401 - browser is a fixture
from test_ui_fragmentation_browser import fleet16k, shot  # noqa: F401 - fleet16k is a fixture
from topology.demo import demo_objects

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
BLOCKWIDE = indexed_job("blockwide", pods=8, gpus=8, segment=None, required="block")   # fits if 2 pods go
CARD = '[data-gang="team-a/pg-blockwide-uid-blockwide"]'
LONG_NODE = "gpu-node-" + "h100-sxm-80gb-" * 8 + "0099"                  # 125 characters
LONG_RACK = "b-block-2-rack-with-a-name-much-longer-than-any-box-holds-9"    # a label value: at most 63
LONG_JOB = "a-training-run-whose-name-is-much-longer-than-a-card"


def long_named_node() -> dict:
    node = copy.deepcopy(next(o for o in demo_objects() if o["metadata"].get("name") == "node-32"))
    node["metadata"]["name"] = LONG_NODE
    node["metadata"]["labels"].update({"kubernetes.io/hostname": LONG_NODE, "network.example.com/rack": LONG_RACK})
    return node


@pytest.fixture(scope="module")
def demo():
    long_job = indexed_job(LONG_JOB, pods=2, gpus=2, segment=None, required="rack")
    service = Service([*copy.deepcopy(demo_objects()), long_named_node(), BLOCKWIDE, long_job])
    service.schedule(job_pods(BLOCKWIDE)[0])           # refused: a-block-1 fits 6 of 8 pods
    for pod in job_pods(long_job):
        service.schedule(pod)
    yield service
    service.stop()


def redrawn(browser, selector: str) -> None:
    """Wait for the page to rebuild the element `selector` finds (the demo's `now` changes every refresh)."""
    browser.evaluate(f"window.__before = document.querySelector('{selector}')")
    browser.wait_for(f"document.querySelector('{selector}') && document.querySelector('{selector}') !== window.__before",
                     "a redraw")


def reload(browser, url: str) -> None:
    browser.evaluate("window.__old = true")
    browser.call("Page.reload")
    browser.wait_for("!window.__old && !!document.querySelector('#updated') && "
                     "document.querySelector('#updated').textContent !== 'never'", f"the first refresh of {url} again")


def test_an_unfolded_reason_stays_open_across_refreshes_and_a_reload(demo, browser):
    """Defect: the <details> was rebuilt folded at the next refresh (every 1 s here)."""
    url = f"{demo.url}/ui?refresh=1"
    loaded(browser, url)
    browser.evaluate("sessionStorage.clear()")
    browser.evaluate(f"document.querySelector('{CARD} details.reason summary').click()")
    assert browser.evaluate(f"document.querySelector('{CARD} details.reason').open")
    redrawn(browser, f"{CARD} details.reason")
    assert browser.evaluate(f"document.querySelector('{CARD} details.reason').open")
    reload(browser, url)
    assert browser.evaluate(f"document.querySelector('{CARD} details.reason').open")
    browser.evaluate(f"document.querySelector('{CARD} details.reason').open = false")   # folded again: stays so
    redrawn(browser, f"{CARD} details.reason")
    assert browser.evaluate(f"document.querySelector('{CARD} details.reason').open") is False
    assert browser.errors() == []


def test_the_scroll_position_survives_a_refresh_and_a_reload(demo, browser):
    url = f"{demo.url}/ui?refresh=1"
    loaded(browser, url)
    browser.call("Emulation.setDeviceMetricsOverride", width=1400, height=500, deviceScaleFactor=1, mobile=False)
    try:
        browser.evaluate("window.scrollTo(0, 400)")
        assert browser.evaluate("window.scrollY") == 400
        redrawn(browser, "#tree .domain")
        assert browser.evaluate("window.scrollY") == 400
        reload(browser, url)
        assert browser.evaluate("window.scrollY") == 400
    finally:
        browser.call("Emulation.setDeviceMetricsOverride", width=1400, height=1000, deviceScaleFactor=1, mobile=False)


def test_the_advice_marks_its_domain_and_its_victims_nodes(demo, browser, tmp_path):
    """Defect: the domain and the pods the what-if advice names were only text in the card."""
    loaded(browser, f"{demo.url}/ui")
    browser.evaluate(f"document.querySelector('{CARD} .gang-head').click()")
    browser.wait_for(f"!!document.querySelector('{CARD} .ask')", "the what-if button")
    browser.evaluate(f"document.querySelector('{CARD} .ask').click()")
    browser.wait_for("!!document.querySelector('.domain.advised')", "the advised domain marked")
    advice = demo.http.get("/debug/whatif/team-a/pg-blockwide-uid-blockwide").json()
    assert advice["domain"] and advice["victims"]
    assert browser.evaluate("[...document.querySelectorAll('.domain.advised')].map((d) => d.dataset.domain)") == \
        [advice["domain"]]
    victims = browser.evaluate("[...document.querySelectorAll('.node.victim')].map((n) => n.dataset.node)")
    assert sorted(victims) == sorted({v["node"] for v in advice["victims"]})
    for victim in advice["victims"]:
        title = browser.evaluate(f"document.querySelector('[data-node=\"{victim['node']}\"]').title")
        assert f"what-if: evict {victim['pod']} (priority {victim['priority']})" in title
    redrawn(browser, ".domain.advised")                             # and it stays marked
    assert browser.errors() == []
    shot(browser, tmp_path, "ui-demo-advice.png")


def test_long_names_are_shortened_with_the_full_name_on_hover_and_stay_on_the_page(demo, browser, tmp_path):
    """Defect: a long node, rack or workload name ran off its box and off the page."""
    loaded(browser, f"{demo.url}/ui")
    assert browser.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    node = f"[data-node=\"{LONG_NODE}\"]"
    name = browser.evaluate(f"document.querySelector('{node} .node-name').textContent")
    assert "…" in name and len(name) <= 11 and name.startswith("gpu-n") and name.endswith("0099")
    assert browser.evaluate(f"document.querySelector('{node}').title").startswith(LONG_NODE + ":")
    rack = browser.evaluate(f"document.querySelector('[data-domain$=\"/{LONG_RACK}\"] .domain-name').title")
    assert rack.endswith(LONG_RACK)
    job = browser.evaluate(f"[...document.querySelectorAll('.gang-name')].find((g) => g.title.startsWith('{LONG_JOB}'))"
                           ".textContent")
    assert "…" in job
    overflowing = browser.evaluate("""[...document.querySelectorAll('.node-name, .domain-name, .gang-name, .gang-tag, .chip')]
        .filter((e) => e.closest('.node, .domain, .gang'))          // not the legend's samples
        .filter((e) => { const box = e.closest('.node, .domain, .gang').getBoundingClientRect();
                         const r = e.getBoundingClientRect(); return r.width > 0 && r.right > box.right + 1; })
        .map((e) => e.textContent)""")
    assert overflowing == []
    assert browser.errors() == []
    shot(browser, tmp_path, "ui-demo-long-names.png")


def test_search_finds_a_domain_and_brings_it_into_view(demo, browser):
    loaded(browser, f"{demo.url}/ui")
    click_search_hit(browser, "a-block-2-rack-1", "domain-hit")
    browser.wait_for("!!document.querySelector('[data-domain=\"zone-a/a-block-2/a-block-2-rack-1\"].found')",
                     "the rack outlined")
    redrawn(browser, "#tree .domain")
    assert browser.evaluate("!!document.querySelector('[data-domain=\"zone-a/a-block-2/a-block-2-rack-1\"].found')")


def test_at_16k_nodes_a_found_domain_opens_and_expanded_domains_survive_a_reload(fleet16k, browser, tmp_path):
    url = f"{fleet16k.url}/ui"
    loaded(browser, url)
    browser.evaluate("sessionStorage.clear()")
    rack = fleet16k.http.get("/debug/search", params={"q": "rack-7", "limit": 1}).json()["domains"][0]
    click_search_hit(browser, rack["domain"].split("/")[-1], "domain-hit")
    found = f"[data-domain=\"{rack['domain']}\"].found"
    browser.wait_for(f"!!document.querySelector('{found}')", "the rack opened and outlined")
    block = rack["path"][-2]
    assert browser.evaluate(f"!document.querySelector('[data-domain=\"{block}\"]').classList.contains('collapsed')")
    reload(browser, url)
    browser.wait_for(f"!!document.querySelector('[data-domain=\"{block}\"]:not(.collapsed)')", "the block still open")
    assert browser.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert browser.errors() == []
    shot(browser, tmp_path, "ui-16k-found-rack.png")
