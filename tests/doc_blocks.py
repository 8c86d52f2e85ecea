"""Read the checked code blocks of a Markdown page (README.md, docs/*.md); tests/test_docs.py runs them.

The convention, for anyone adding a checked section (docs/development.md#checked-documentation says the
same for readers):

- Every ```sh block is run, in page order, by bash, unless the line just before its fence is
  `<!-- doc-test: skip REASON -->` (a reason is required: say what checks it instead, or why nothing can).
- Inside a ```sh block, lines that start with `# ` (or are a bare `#`) right after code are the expected
  output of the code since the previous output. A `#` line that comes first in a block, or right after
  other output, is a comment (in heredoc bodies nothing is output). Code with no `# ` lines after it must
  still exit 0; its output is not compared.
- A fenced block whose fence is preceded by `<!-- doc-test: output -->` is the expected output of the last
  code before it, when it is too long for `# ` lines.
- A line `...` in expected output matches any number of lines; `...` inside a line matches any text. Before
  comparing, both sides are normalized (see `normalize`): the service's port becomes 8888, clock times,
  UUIDs and millisecond figures become placeholders, trailing spaces go.
- Each page runs in one session against its own freshly started demo service
  (`tas-extender serve --port P`; `localhost:8888` in a command is rewritten to P). Commands start in the
  repository root; `cd` and `export` carry over to the next piece of code, as in a terminal. A page must
  not leave files behind in the repository: write them to `mktemp -d`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

DIRECTIVE = re.compile(r"^\s*<!--\s*doc-test:\s*(\w+)\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+)\s*([\w+-]*)")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_]\w*)\1")


@dataclass
class Step:
    """Code to run, and what it must print (None: only exit 0)."""
    code: str
    line: int
    expected: str | None = None


@dataclass
class Page:
    steps: list[Step] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)     # (line, reason) of every skipped sh block


def _blocks(text: str):
    """(directive, argument, info, first line number, lines) of every fenced block."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        indent, ticks, info = match.groups()
        previous = lines[index - 1] if index else ""
        directive = DIRECTIVE.match(previous)
        body, start = [], index + 1
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(ticks):
            line = lines[index]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            index += 1
        index += 1
        yield (directive.group(1) if directive else None, directive.group(2) if directive else "", info, start, body)


def _steps(body: list[str], first_line: int) -> list[Step]:
    steps: list[Step] = []
    code: list[str] = []
    output: list[str] | None = None
    start = first_line
    heredoc: str | None = None

    def flush() -> None:
        nonlocal code, output
        if code:
            steps.append(Step("\n".join(code), start, None if output is None else "\n".join(output)))
        elif output is not None and steps and steps[-1].expected is None:
            steps[-1].expected = "\n".join(output)
        code, output = [], None

    for number, line in enumerate(body, first_line + 1):
        if heredoc is not None:
            code.append(line)
            if line.strip() == heredoc:
                heredoc = None
            continue
        if (line.startswith("# ") or line == "#") and code:
            output = (output or []) + [line[2:]]
            continue
        if output is not None:
            flush()
            start = number
        if not code:
            start = number
        code.append(line)
        found = HEREDOC.search(line)
        if found and not line.lstrip().startswith("#"):
            heredoc = found.group(2)
    flush()
    return [step for step in steps if step.code.strip() and not all(
        ln.lstrip().startswith("#") or not ln.strip() for ln in step.code.splitlines())]


def parse(text: str) -> Page:
    page = Page()
    for directive, argument, info, line, body in _blocks(text):
        if directive == "output":
            if not page.steps:
                raise ValueError(f"line {line}: an output block before any code")
            if page.steps[-1].expected is not None:
                raise ValueError(f"line {line}: the code before this output block already shows its output")
            page.steps[-1].expected = "\n".join(body)
        elif info == "sh":
            if directive == "skip":
                if not argument:
                    raise ValueError(f"line {line}: doc-test: skip needs a reason")
                page.skipped.append((line, argument))
            elif directive is not None:
                raise ValueError(f"line {line}: unknown doc-test directive {directive!r} (valid: skip, output)")
            else:
                page.steps.extend(_steps(body, line))
        elif directive is not None:
            raise ValueError(f"line {line}: doc-test: {directive} before a ```{info} block (valid on ```sh: skip; "
                             f"on any block: output)")
    return page


# ---- comparing outputs ------------------------------------------------------------------------------

_NORMAL = [
    (re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?"), "<time>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}\b"), "<time>"),
    (re.compile(r"(?<![\w:])\d{1,2}:\d{2}(?![\w:])"), "<time>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uid>"),
    (re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|µs|us)\b"), "<ms>"),
]


def normalize(text: str, port: int | None = None) -> str:
    if port is not None:
        text = re.sub(rf"\b{port}\b", "8888", text)
    for pattern, placeholder in _NORMAL:
        text = pattern.sub(placeholder, text)
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def matches(expected: str, actual: str) -> bool:
    """`expected` (normalized, with `...` wildcards) against all of `actual` (normalized)."""
    parts = []
    for line in expected.splitlines():
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(r"[^\n]*?".join(re.escape(piece) for piece in line.split("...")) + r"\n")
    return re.fullmatch("".join(parts), actual + "\n") is not None
