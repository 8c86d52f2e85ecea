"""manifests/install.yaml (the one-file install) against the kustomize tree, and the two overlays: the namespace
(manifests/namespace/) and the kube-scheduler image (manifests/overlays/scheduler-image/). Built with the real
kustomize (`kubectl kustomize`, from TAS_K8S_ASSETS or PATH), offline."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from test_manifests import MANIFESTS, ROOT, build, container, get, kustomization, scheduler_config, \
    scheduler_deployment, extender_entry
from urllib.parse import urlsplit

INSTALL = MANIFESTS / "install.yaml"
GENERATOR = ROOT / "scripts" / "gen-install.sh"
SCHEDULER_IMAGE = "registry.k8s.io/kube-scheduler"


def kubectl() -> str | None:
    assets = os.environ.get("TAS_K8S_ASSETS")
    if assets and (Path(assets) / "kubectl").is_file():
        return str(Path(assets) / "kubectl")
    return shutil.which("kubectl")


needs_kubectl = pytest.mark.skipif(kubectl() is None, reason="kubectl not found: set TAS_K8S_ASSETS (binaries)")


def kustomize(directory: Path) -> str:
    return subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True,
                          check=True).stdout


def documents(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


# --- the install file -------------------------------------------------------------------------------------------

def test_install_file_is_the_release_version_of_the_kustomize_tree():
    header = INSTALL.read_text().splitlines()[0]
    assert re.match(rf"# tas-extender {re.escape(version())}:", header), header
    images = {i["name"]: i for i in kustomization(MANIFESTS / "images")["images"]}
    assert images["tas-extender"]["newTag"] == version(), "the image tag is the release's version"
    key = lambda d: (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])  # noqa: E731
    assert sorted(documents(INSTALL.read_text()), key=key) == sorted(build(MANIFESTS), key=key)


@needs_kubectl
def test_install_file_equals_the_kustomize_output():
    result = subprocess.run(["bash", str(GENERATOR), "--check"], capture_output=True, text=True,
                            env={**os.environ, "KUBECTL": kubectl()})
    assert result.returncode == 0, result.stderr


@needs_kubectl
def test_the_check_fails_on_a_changed_tree(tmp_path):
    copy = tmp_path / "repo"
    for part in ("manifests", "scripts", "pyproject.toml"):
        (shutil.copytree if (ROOT / part).is_dir() else shutil.copy)(ROOT / part, copy / part)
    deployment = copy / "manifests" / "base" / "scheduler-deployment.yaml"
    deployment.write_text(deployment.read_text().replace("replicas: 2", "replicas: 3"))
    result = subprocess.run(["bash", str(copy / "scripts" / "gen-install.sh"), "--check"], capture_output=True,
                            text=True, env={**os.environ, "KUBECTL": kubectl()})
    assert result.returncode == 1
    assert "manifests/install.yaml is out of date: run scripts/gen-install.sh" in result.stderr


def test_the_generator_names_a_bad_flag():
    result = subprocess.run(["bash", str(GENERATOR), "--chek"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "unknown argument '--chek' (valid: --check, --help)" in result.stderr


# --- the namespace overlay --------------------------------------------------------------------------------------

def manifests_copy(tmp_path: Path) -> Path:
    shutil.copytree(MANIFESTS, tmp_path / "manifests")
    return tmp_path / "manifests"


def set_namespace(manifests: Path, namespace: str) -> None:
    component = manifests / "namespace" / "kustomization.yaml"
    text, count = re.subn(r"value: tas-ml( +# <- your namespace)", rf"value: {namespace}\1", component.read_text())
    assert count == 1, "the namespace is one setting"
    component.write_text(text)


@needs_kubectl
@pytest.mark.parametrize("overlay,plain", [("namespace", MANIFESTS),
                                           ("namespace-cert-manager", MANIFESTS / "cert-manager")])
def test_the_namespace_overlay_moves_every_place(tmp_path, overlay, plain):
    manifests = manifests_copy(tmp_path)
    set_namespace(manifests, "team-sched")
    before, after = kustomize(plain), kustomize(manifests / "overlays" / overlay)
    assert "tas-system" not in after
    assert after.count("team-sched") == before.count("tas-system")   # every place, none added or lost
    assert after.replace("team-sched", "tas-system") == before        # and nothing else changed
    docs = documents(after)
    namespaced = [d for d in docs if "namespace" in d["metadata"]]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"team-sched", "kube-system"}
    (kept,) = [d for d in namespaced if d["metadata"]["namespace"] == "kube-system"]
    assert kept["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    assert kept["subjects"] == [{"kind": "ServiceAccount", "name": "tas-scheduler", "namespace": "team-sched"}]
    # the scheduler dials the Service by its short name from its own namespace, under a name the certificate holds
    host = urlsplit(extender_entry(scheduler_config(docs))["urlPrefix"]).hostname
    assert scheduler_deployment(docs)["metadata"]["namespace"] == "team-sched" and host == "tas-extender"
    if overlay == "namespace-cert-manager":
        names = get(docs, "Certificate", "tas-extender")["spec"]["dnsNames"]
        assert {host, "tas-extender.team-sched.svc"} <= set(names)


def test_the_namespace_is_one_setting_of_the_component():
    text = (MANIFESTS / "namespace" / "kustomization.yaml").read_text()
    assert len(re.findall(r"<- your namespace", text)) == 1


# --- the kube-scheduler image overlay ----------------------------------------------------------------------------

@needs_kubectl
def test_the_scheduler_image_overlay_changes_the_scheduler_image_only(tmp_path):
    manifests = manifests_copy(tmp_path)
    overlay = manifests / "overlays" / "scheduler-image" / "kustomization.yaml"
    spec = yaml.safe_load(overlay.read_text())
    (image,) = spec["images"]
    assert image["name"] == SCHEDULER_IMAGE
    text = overlay.read_text().replace(f"newName: {SCHEDULER_IMAGE} ", "newName: mirror.example/kube-scheduler ")
    overlay.write_text(re.sub(r"newTag: v[\d.]+", "newTag: v1.33.7", text))
    before, after = documents(kustomize(MANIFESTS)), documents(kustomize(overlay.parent))
    images = [c["image"] for d in after for c in
              ((d.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers", [])]
    assert "mirror.example/kube-scheduler:v1.33.7" in images
    assert not [i for i in images if "kube-scheduler" in i and i != "mirror.example/kube-scheduler:v1.33.7"]
    container(scheduler_deployment(after))["image"] = container(scheduler_deployment(before))["image"]
    assert after == before
