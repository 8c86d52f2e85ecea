"""Shared fixtures. Keep this small: put helpers a single test file needs in that file."""
from __future__ import annotations

import os

import pytest
from hypothesis import settings

# No per-example deadline anywhere (a loaded 2-core machine must not fail a property). On CI the
# examples are derived from each test's name, so a red run is reproducible and a green main stays green;
# locally every run explores new examples.
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

from topology.cluster import Cluster
from topology.demo import demo_objects
from topology.objects import ClusterObjects


@pytest.fixture
def demo_cluster() -> Cluster:
    """A fresh demo cluster (2 zones x 2 blocks x 2 racks x 4 nodes of 8 GPUs, some busy)."""
    return Cluster.from_objects(ClusterObjects.from_objects(demo_objects()))


# ---- one line at the end of every run: what was skipped, and how to run it -------------------------------

SKIPPED_GROUPS = (
    # (node id prefix, a word of the skip's reason, group, how to enable it): a skip for any other reason keeps
    # its own reason, so a test skipped on purpose (say, with the native gates on) is not told to set a variable
    ("tests/e2e/", "binaries", "end-to-end",
     "set TAS_K8S_ASSETS to a folder with the Kubernetes v1.36 binaries (README, Quick start)"),
    ("tests/", "chromium", "debug page", "install chromium at /usr/bin/chromium (apt-get install -y chromium)"),
)


def _skip_group(report) -> tuple[str, str]:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    for prefix, cause, group, how in SKIPPED_GROUPS:
        if report.nodeid.startswith(prefix) and cause in reason:
            return group, how
    if report.nodeid.startswith("tests/e2e/"):
        return "end-to-end", reason
    return report.nodeid.split("::", 1)[0].removeprefix("tests/"), reason


def skipped_summary(reports) -> str:
    """`skipped: 43 end-to-end (set TAS_K8S_ASSETS ...); 11 debug page (install chromium ...)`, or none."""
    groups: dict[tuple[str, str], int] = {}
    for report in reports:
        key = _skip_group(report)
        groups[key] = groups.get(key, 0) + 1
    if not groups:
        return "skipped: nothing"
    return "skipped: " + "; ".join(f"{count} {group} ({how})" for (group, how), count in groups.items())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session):
    """After everything pytest prints (its count of passed and skipped tests, the short summary of -qq), so
    that the run's last line is this one, as the README says."""
    result = yield
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        skipped = [report for report in reporter.stats.get("skipped", []) if report.when in ("setup", "call")]
        reporter.write_line(skipped_summary(skipped), yellow=bool(skipped), green=not skipped)
    return result
