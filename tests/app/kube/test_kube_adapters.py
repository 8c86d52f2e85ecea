"""The adapters wired as the service uses them: kubeconfig loading, ServiceState as the sink, readiness."""
from __future__ import annotations

import pytest
import yaml
from fakekube import fake_kube, wait_until  # noqa: F401 - fake_kube is a fixture

from app.kube import KubeApi, KubeParts, LeaderElector, adapters, build_api_client
from app.settings import Settings
from app.state import ServiceState


def write_kubeconfig(path, server: str, token: str) -> str:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "robot", "user": {"token": token}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "robot"}}]}))
    return str(path)


def test_kubeconfig_is_loaded_with_its_token(fake_kube, tmp_path):
    fake_kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0"}})
    kubeconfig = write_kubeconfig(tmp_path / "config", fake_kube.url, "s3cret")
    api = KubeApi(build_api_client(kubeconfig=kubeconfig))
    assert [n["metadata"]["name"] for n in api.request("GET", "/api/v1/nodes")["items"]] == ["n0"]
    assert "Bearer s3cret" in fake_kube.authorizations


def test_a_missing_kubeconfig_is_a_clear_error(tmp_path):
    with pytest.raises(Exception, match="config"):
        build_api_client(kubeconfig=str(tmp_path / "nope"))


def test_service_state_becomes_ready_after_the_first_sync(fake_kube, tmp_path):
    fake_kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0", "labels": {"rack": "r0"}},
                      "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "8"},
                                 "conditions": [{"type": "Ready", "status": "True"}]}})
    settings = Settings(kubeconfig=write_kubeconfig(tmp_path / "config", fake_kube.url, "t"))
    state = ServiceState(settings)
    parts = adapters(settings).parts(state)
    assert parts.elector is None
    parts.source.start()
    try:
        wait_until(lambda: state.ready()[0], what="ready after sync")
        assert [n["metadata"]["name"] for n in state.objects.list("Node")] == ["n0"]
    finally:
        parts.source.stop()


def test_with_leader_election_only_the_leader_is_ready(fake_kube, tmp_path):
    kubeconfig = write_kubeconfig(tmp_path / "config", fake_kube.url, "t")
    settings = Settings(kubeconfig=kubeconfig, leader_elect=True, lease_namespace="tas-system")
    connection = adapters(settings)
    assert isinstance(connection.elector, LeaderElector)
    elector = LeaderElector(connection.elector.api, "tas-system", "tas-extender", "replica-a",   # fast timings
                            lease_duration=3.0, renew_deadline=2.0, retry_period=0.1)
    state = ServiceState(settings, elector=elector)
    parts = KubeParts(connection.source(state), connection.writer, elector)
    fake_kube.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                      "metadata": {"name": "tas-extender", "namespace": "tas-system"},
                      "spec": {"holderIdentity": "replica-b", "leaseDurationSeconds": 60}})
    parts.source.start()
    parts.elector.start()
    try:
        wait_until(lambda: state.synced_once and parts.elector.attempts >= 3, what="synced, standing by")
        assert state.ready() == (False, "not the leader (standby)")
        fake_kube.update("coordination.k8s.io/v1", "Lease", "tas-extender",
                         {"spec": {"holderIdentity": ""}}, namespace="tas-system")     # replica-b released
        wait_until(lambda: state.ready()[0], what="leader and ready")
    finally:
        parts.elector.stop()
        parts.source.stop()
