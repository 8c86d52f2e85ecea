#!/usr/bin/env bash
# Regenerates requirements.lock: every package the service image installs (pyproject's [project.dependencies]
# and [build-system.requires], with their dependencies), pinned to one version each and with the sha256 of every
# file PyPI holds for it, for the image's Python (3.11) on linux x86_64. The Dockerfile installs it with
# `pip install --require-hashes`. tests/test_release.py fails when pyproject's requirements changed since.
# Needs network access to PyPI and uv (`pip install uv`).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON_VERSION=3.11
command -v uv >/dev/null || { echo "error: uv is required (pip install uv)" >&2; exit 1; }
fingerprint=$(python3 -c 'import sys; sys.path.insert(0, "tests"); import lockfile; print(lockfile.fingerprint())')
build_requires=$(python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))')
body=$(printf '%s\n' "$build_requires" | uv pip compile pyproject.toml - --generate-hashes --no-header --quiet \
  --python-version "$PYTHON_VERSION" --python-platform x86_64-manylinux_2_28)
{
  echo "# requirements.lock: what the service image installs, pinned with hashes (pip install --require-hashes)."
  echo "# Regenerate with scripts/lock.sh after changing pyproject's dependencies or build requirements."
  echo "# python: $PYTHON_VERSION"
  echo "# inputs: $fingerprint"
  printf '%s\n' "$body"
} > requirements.lock
echo "wrote requirements.lock ($(grep -c '^[a-z0-9].*==' requirements.lock) packages)" >&2
