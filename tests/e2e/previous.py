"""The previous release of tas-extender, for the upgrade test: a commit of this repository unpacked with
`git archive` into its own venv, cached between runs.

No release is tagged yet (every commit says 0.1.0), so the previous version is a commit: by default the last
one before issue 40's changes (certificate reload, slow-client timeouts, the lock file, the install file, the
scheduling gate of unfit gangs), the service as it was installed on 2026-11-27. TAS_E2E_PREVIOUS names another
commit (or tag). The venv is the commit's source tree and a `.pth` line to this interpreter's packages: the
previous release's dependencies are a subset of today's, and its image installed them unlocked anyway.
"""
from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from pathlib import Path

from service import REPO, Runtime

PREVIOUS = "057a618e1bc422d0d49fc7019e0218abdeb91cff"


def previous_commit() -> str:
    return os.environ.get("TAS_E2E_PREVIOUS", PREVIOUS)


def cache_folder() -> Path:
    return Path(os.environ.get("TAS_E2E_CACHE") or Path(tempfile.gettempdir()) / "tas-extender-e2e")


def previous_release() -> tuple[Runtime | None, str]:
    """The previous release's Runtime, or None and why it cannot be built here."""
    if not shutil.which("git"):
        return None, "git is needed to unpack the previous release"
    wanted = previous_commit()
    found = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", f"{wanted}^{{commit}}"],
                           capture_output=True, text=True)
    if found.returncode:
        return None, f"the previous release {wanted} is not in this clone (a shallow clone? TAS_E2E_PREVIOUS)"
    commit = found.stdout.strip()
    packages = sysconfig.get_paths()["purelib"]
    folder = cache_folder() / f"previous-{commit[:12]}-{hashlib.sha1(packages.encode()).hexdigest()[:8]}"
    python = folder / "venv" / "bin" / "python"
    if not (folder / "ready").exists():
        try:
            _build(commit, folder, packages)
        except (OSError, subprocess.CalledProcessError, tarfile.TarError) as err:
            shutil.rmtree(folder, ignore_errors=True)
            return None, f"could not build the previous release {commit[:12]}: {err}"
    return Runtime(str(python), folder / "source"), commit


def _build(commit: str, folder: Path, packages: str) -> None:
    building = folder.with_name(folder.name + f".building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(building / "source", filter="data")
    subprocess.run([_base_python(), "-m", "venv", "--without-pip", str(building / "venv")], check=True,
                   capture_output=True)
    (site,) = (building / "venv" / "lib").glob("python3*/site-packages")
    # the dependencies: this interpreter's packages (not its .pth files, so not this checkout's own install)
    (site / "dependencies.pth").write_text(packages + "\n")
    (building / "ready").write_text(commit + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    building.rename(folder)


def _base_python() -> str:
    """The interpreter this venv was made from (a venv made by a venv's python would share its prefix)."""
    return getattr(sys, "_base_executable", sys.executable)
