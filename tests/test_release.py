"""The reproducible release: requirements.lock (hashed pins the image installs) against pyproject.toml, offline.

"Stale" means the lock was not made from pyproject's current requirements: its recorded fingerprint of them
differs (any edit to a requirement, a bound or requires-python), a requirement has no pin or a pin outside its
range, or a package is pinned for a requirement pyproject no longer has. Each is checked without the network.
"""
from __future__ import annotations

import re

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import lockfile
from test_manifests import dockerfile

LOCK_TEXT = lockfile.LOCK.read_text()
IMAGE_ENVIRONMENT = {**default_environment(), "sys_platform": "linux", "platform_system": "Linux",
                     "python_version": "3.11", "python_full_version": "3.11.0"}


def required(text_requirements: list[str]) -> list[Requirement]:
    """The requirements that apply in the image (linux, Python 3.11)."""
    parsed = [Requirement(r) for r in text_requirements]
    return [r for r in parsed if r.marker is None or r.marker.evaluate(IMAGE_ENVIRONMENT)]


def image_requirements() -> list[Requirement]:
    project = lockfile.pyproject()
    return required(project["project"]["dependencies"] + project["build-system"]["requires"])


def stale_reasons(text: str, requirements: list[Requirement], fingerprint: str) -> list[str]:
    pins = lockfile.entries(text)
    reasons = []
    if lockfile.header(text, "inputs") != fingerprint:
        reasons.append("pyproject's requirements changed since the lock was made")
    for requirement in requirements:
        pin = pins.get(canonicalize_name(requirement.name))
        if pin is None:
            reasons.append(f"{requirement.name} is not in the lock")
        elif not requirement.specifier.contains(pin[0], prereleases=True):
            reasons.append(f"{requirement.name}=={pin[0]} is outside {requirement.specifier}")
    wanted = {canonicalize_name(r.name) for r in requirements}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = lockfile.PIN.match(block)
        if match and "tas-extender (pyproject.toml)" in block and canonicalize_name(match.group(1)) not in wanted:
            reasons.append(f"{match.group(1)} is pinned for pyproject but no longer required")
    return reasons


def test_lock_is_current_with_pyproject():
    reasons = stale_reasons(LOCK_TEXT, image_requirements(), lockfile.fingerprint())
    assert not reasons, "requirements.lock is stale (run scripts/lock.sh): " + "; ".join(reasons)


@pytest.mark.parametrize("edit,reason", [
    (lambda reqs: reqs + ["sortedcontainers>=2"], "sortedcontainers is not in the lock"),
    (lambda reqs: [r.replace("numpy>=1.26", "numpy>=99") for r in reqs], "outside >=99"),
    (lambda reqs: [r for r in reqs if not r.startswith("orjson")], "orjson is pinned for pyproject but no longer"),
    (lambda reqs: [r.replace("pydantic>=2.6,<3", "pydantic>=2.6,<2.99") for r in reqs], "requirements changed"),
], ids=["added", "raised", "removed", "narrowed"])
def test_staleness_check_catches_each_kind_of_change(edit, reason):
    project = lockfile.pyproject()
    project["project"]["dependencies"] = edit(project["project"]["dependencies"])
    reasons = stale_reasons(LOCK_TEXT, required(project["project"]["dependencies"] + project["build-system"]["requires"]),
                            lockfile.fingerprint(project))
    assert any(reason in r for r in reasons), reasons


def test_every_pin_has_a_hash_and_one_version():
    pins = lockfile.entries(LOCK_TEXT)
    assert len(pins) >= len(image_requirements())
    for name, (version, hashes) in pins.items():
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), name
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), f"{name} has no sha256"
    assert LOCK_TEXT.count("==") == len(pins), "each package pinned once"


def test_lock_is_for_the_images_python():
    base = dict(arg.split("=", 1) for arg in dockerfile()["ARG"])["PYTHON_IMAGE"]
    (python,) = re.findall(r"python:(\d+\.\d+)-", base)
    assert lockfile.header(LOCK_TEXT, "python") == python
    assert Requirement(f"x{lockfile.pyproject()['project']['requires-python']}").specifier.contains(python + ".0")


def test_the_image_installs_only_from_the_lock():
    df = dockerfile()
    assert "requirements.lock" in df["COPY"]
    steps = [s.strip() for s in df["RUN"].split("&&")]
    installs = [s for s in steps if s.startswith("pip install")]
    assert installs[0] == "pip install --require-hashes --no-deps -r requirements.lock"
    assert all("--no-deps" in s and ("--require-hashes" in s or "--no-index" in s) for s in installs), installs
