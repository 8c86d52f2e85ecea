"""The commands shown in README.md and docs/*.md, run against a freshly started demo service, print what the
pages show (the convention is in tests/doc_blocks.py and docs/development.md#checked-documentation)."""
from __future__ import annotations

import contextlib
import difflib
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from doc_blocks import matches, normalize, parse

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
IGNORED = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", "out", "node_modules"}
STEP_TIMEOUT = 120


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def _service(log: Path):
    """The quick start's `tas-extender serve` (the demo cluster), on a free port."""
    port = _free_port()
    binary = Path(sys.executable).parent / "tas-extender"
    with log.open("w") as out:
        process = subprocess.Popen([str(binary), "serve", "--port", str(port)], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, f"the demo service exited: {log.read_text()[-2000:]}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"the demo service did not get ready: {log.read_text()[-2000:]}"
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        if process.poll() is None:
            process.kill()
            process.wait()


def _files() -> set[str]:
    found = set()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in IGNORED and not d.endswith(".egg-info")]
        found.update(os.path.relpath(os.path.join(folder, name), ROOT) for name in files)
    return found


def _run(code: str, port: int, state: Path) -> tuple[int, str]:
    """One piece of code in bash; the working folder and exported variables carry over through `state`."""
    code = code.replace("localhost:8888", f"localhost:{port}").replace("127.0.0.1:8888", f"127.0.0.1:{port}")
    script = (f'cd "$(cat {state}/cwd)" && . {state}/env\n{code}\n__rc=$?\n'
              f'export -p > {state}/env; pwd > {state}/cwd; exit $__rc\n')
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                          timeout=STEP_TIMEOUT)
    return done.returncode, done.stdout.decode(errors="replace")


def _pages_with_steps():
    return [pytest.param(page, id=page.relative_to(ROOT).as_posix()) for page in PAGES
            if parse(page.read_text()).steps]


@pytest.mark.parametrize("page", _pages_with_steps())
def test_page_commands_print_what_the_page_shows(page: Path, tmp_path: Path):
    steps = parse(page.read_text()).steps
    before = _files()
    state = tmp_path / "state"
    state.mkdir()
    (state / "cwd").write_text(str(ROOT))
    (state / "env").write_text("")
    with _service(tmp_path / "service.log") as port:
        for step in steps:
            where = f"{page.relative_to(ROOT)}:{step.line}"
            code, output = _run(step.code, port, state)
            actual = normalize(output, port)
            assert code == 0, f"{where} exited {code}:\n{step.code}\n--- output\n{output}"
            if step.expected is not None:
                expected = normalize(step.expected)
                assert matches(expected, actual), (
                    f"{where} printed something else than the page shows:\n{step.code}\n--- diff (page, actual)\n"
                    + "\n".join(difflib.unified_diff(expected.splitlines(), actual.splitlines(), "page", "actual",
                                                     lineterm="")))
    left = sorted(_files() - before)
    assert not left, f"{page.relative_to(ROOT)} left files in the repository (write them to mktemp -d): {left}"


def test_every_page_parses_and_every_unrun_block_says_why():
    for page in PAGES:
        parsed = parse(page.read_text())          # raises on an unknown directive or a skip without a reason
        assert all(reason for _, reason in parsed.skipped)


def test_the_readme_is_a_few_screens():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= 400, f"README.md has {lines} lines: keep it a newcomer's few screens, move reference to docs/"


def _quick_start() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = section.split("```sh\n")[1:]
    return [block.split("```", 1)[0].strip() for block in blocks]


def test_the_quick_start_is_two_commands_and_ci_runs_the_test_command_verbatim():
    serve, test = _quick_start()[:2]
    assert serve.endswith("tas-extender serve") and "pip install" in serve
    assert test.endswith("python -m pytest") and '".[test]"' in test
    assert test in (ROOT / ".ci" / "run").read_text().splitlines()


# ---- the runner itself --------------------------------------------------------------------------------

def test_parse_splits_code_and_output_and_leaves_heredocs_and_comments_alone():
    page = parse("\n".join([
        "```sh",
        "# a comment, not output",
        "cat > f.yaml <<'EOF'",
        "# yaml comment inside the heredoc",
        "EOF",
        "cat f.yaml",
        "# # yaml comment inside the heredoc",
        "echo two",
        "```",
        "<!-- doc-test: output -->",
        "```",
        "two",
        "```",
        "<!-- doc-test: skip needs a cluster -->",
        "```sh",
        "kubectl apply -k manifests/",
        "```",
    ]))
    assert [step.code for step in page.steps] == [
        "# a comment, not output\ncat > f.yaml <<'EOF'\n# yaml comment inside the heredoc\nEOF\ncat f.yaml", "echo two"]
    assert [step.expected for step in page.steps] == ["# yaml comment inside the heredoc", "two"]
    assert page.skipped == [(15, "needs a cluster")]


@pytest.mark.parametrize("text", ["<!-- doc-test: skip -->\n```sh\nls\n```",
                                  "<!-- doc-test: run -->\n```sh\nls\n```",
                                  "<!-- doc-test: output -->\n```\nx\n```"])
def test_parse_refuses_a_directive_it_cannot_honour(text):
    with pytest.raises(ValueError):
        parse(text)


def test_matches_ellipsis_and_normalize():
    assert matches("a\n...\nd", "a\nb\nc\nd")
    assert matches("a\n...\nd", "a\nd")
    assert not matches("a\nd", "a\nb\nd")
    assert matches('{"x": 1, ...}', '{"x": 1, "y": 2}')
    assert not matches('{"x": 1, ...}', '{"x": 1,\n"y": 2}')
    assert normalize("until 12:03 on 41234, uid 0f4b2c1e-0000-4000-8000-000000000001, 9.5 ms  ", 41234) \
        == "until <time> on 8888, uid <uid>, <ms>"


# ---- links between the pages ------------------------------------------------------------------------------

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(match) for match in re.findall(r"^#+ (.*)$", text, flags=re.M)}


@pytest.mark.parametrize("page", [pytest.param(p, id=p.relative_to(ROOT).as_posix()) for p in PAGES])
def test_every_relative_link_finds_its_file_and_heading(page: Path):
    broken = []
    for target in LINK.findall(re.sub(r"```.*?```", "", page.read_text(), flags=re.S)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


@pytest.mark.parametrize("command", ["tas-extender plan .* --whatif", "tas-extender topology --cluster"])
def test_the_offline_page_runs_every_offline_command(command):
    """docs/offline.md shows each offline tool in a checked block (they ran only from --help before)."""
    steps = parse((ROOT / "docs" / "offline.md").read_text()).steps
    assert any(re.search(command, " ".join(step.code.split())) and step.expected for step in steps)


def test_the_extender_manifest_header_names_its_three_listeners():
    header = (ROOT / "manifests" / "base" / "extender-deployment.yaml").read_text().split("\napiVersion")[0]
    text = " ".join(header.split())
    assert "one HTTPS port" not in text and all(port in text for port in ("8888", "8889", "127.0.0.1:8890"))
