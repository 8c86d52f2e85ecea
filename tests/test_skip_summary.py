"""The last line of every test run names each skipped group and how to enable it (tests/conftest.py)."""
from __future__ import annotations

from pathlib import Path

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).parent / "conftest.py").read_text()


def test_the_last_line_names_each_skipped_group_and_how_to_enable_it(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.mkdir("tests")
    pytester.mkdir("tests/e2e")
    (pytester.path / "tests/e2e/test_cluster.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('n', range(3))\ndef test_x(n):\n    pytest.skip('no binaries')\n")
    (pytester.path / "tests/test_other.py").write_text(
        "import pytest\n\n@pytest.mark.skipif(True, reason='needs openssl')\ndef test_y():\n    pass\n\n"
        "def test_z():\n    pass\n")
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "tests")
    last = _summary(result)
    assert "3 end-to-end (set TAS_K8S_ASSETS" in last
    assert "1 test_other.py (needs openssl)" in last


def test_a_skip_for_another_reason_keeps_its_own_reason(pytester):
    """An end-to-end test skipped on a running control plane (gates on) is not told to set TAS_K8S_ASSETS."""
    pytester.makeconftest(CONFTEST)
    pytester.mkdir("tests")
    pytester.mkdir("tests/e2e")
    (pytester.path / "tests/e2e/test_gated.py").write_text(
        "import pytest\n\n@pytest.mark.skipif(True, reason='the API server forbids it with the gates on')\n"
        "def test_x():\n    pass\n")
    last = _summary(pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "tests"))
    assert last == "skipped: 1 end-to-end (the API server forbids it with the gates on)"


def test_every_page_test_skipped_without_chromium_is_one_group(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.mkdir("tests")
    for name in ("test_ui_browser", "test_ui_other_browser"):
        (pytester.path / f"tests/{name}.py").write_text(
            "import pytest\n\n@pytest.mark.skipif(True, reason=\"needs Debian's chromium\")\n"
            "def test_x():\n    pass\n")
    last = _summary(pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "tests"))
    assert last.startswith("skipped: 2 debug page (install chromium"), last


def test_a_run_without_skips_says_so(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_fine="def test_fine():\n    pass\n")
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    assert _summary(result) == "skipped: nothing"


def test_the_line_is_last_after_a_failure_too(pytester):
    """With -qq (the suite's addopts -q and the README's -q) pytest ends on its short summary of failures."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_broken="import pytest\n\ndef test_broken():\n    assert False\n\n"
                                    "@pytest.mark.skipif(True, reason='needs openssl')\ndef test_y():\n    pass\n")
    last = _summary(pytester.runpytest_subprocess("-qq", "-p", "no:cacheprovider"))
    assert last == "skipped: 1 test_broken.py (needs openssl)"


def _summary(result) -> str:
    """The one `skipped:` line: the run's last, after pytest's own count of passed and skipped tests."""
    lines = [line for line in result.outlines if line.startswith("skipped: ")]
    assert len(lines) == 1 and result.outlines[-1] == lines[0], result.outlines
    return lines[0]
