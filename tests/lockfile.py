"""requirements.lock read offline: its pins, its header and the fingerprint of the pyproject inputs it was made
from (scripts/lock.sh writes the fingerprint; tests/test_release.py compares it)."""
from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def inputs(project: dict | None = None) -> list[str]:
    """What the lock is resolved from, normalized: requires-python, runtime and build requirements."""
    project = project or pyproject()
    requirements = project["project"]["dependencies"] + project["build-system"]["requires"]
    return [f"python{project['project']['requires-python']}"] + sorted(str(Requirement(r)) for r in requirements)


def fingerprint(project: dict | None = None) -> str:
    return "sha256:" + hashlib.sha256("\n".join(inputs(project)).encode()).hexdigest()


def header(text: str, key: str) -> str | None:
    match = re.search(rf"^# {key}: (\S+)$", text, re.M)
    return match.group(1) if match else None


def entries(text: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes), one per pinned package."""
    found: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = PIN.match(block)
        if match:
            found[canonicalize_name(match.group(1))] = (match.group(2), re.findall(r"--hash=sha256:(\S+)", block))
    return found
