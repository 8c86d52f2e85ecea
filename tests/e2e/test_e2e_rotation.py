"""Certificate renewal while gangs are being scheduled, on the real control plane: the extender's serving
certificate and its client CA, and kube-scheduler's client certificate, are renewed in their mounted Secrets
(laid out and swapped as the kubelet does) while Jobs keep coming. Nothing may be refused for a certificate,
no pod admitted without the webhook's mutation, and the extender must be serving the new certificate and
trusting the new client CA afterwards, without a restart."""
from __future__ import annotations

import re
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from cluster import E2ECluster
import conftest
from controlplane import gates_from_env, wait_until
from workloads import RACK, distinct, indexed_job, segments, topology

NODES = {f"{z}{r}{n}": (f"zone-{z}", f"block-{z}", f"rack-{z}{r}") for z in "ab" for r in "12" for n in "1234"}
JOBS, PODS, GPUS = 10, 4, 2                        # 10 gangs of 4 pods x 2 GPUs: 80 of the 128 GPUs
TLS_ERRORS = re.compile(r"x509|certificate|tls:|handshake", re.I)


@pytest.fixture(scope="module")
def rotation_cluster(tmp_path_factory):
    """Its own control plane: the session's cluster keeps its certificates as they are."""
    for plane in conftest._plane(tmp_path_factory, gates_from_env()):
        e2e = E2ECluster(plane, replicas=2, secret_volumes=True)
        try:
            yield e2e.install()
        finally:
            e2e.stop()


def openssl(*args) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def new_ca(folder: Path, name: str) -> tuple[Path, Path]:
    crt, key = folder / f"{name}.crt", folder / f"{name}.key"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
            "-out", crt, "-days", "2", "-subj", f"/CN={name}")
    return crt, key


def client_cert(folder: Path, ca: tuple[Path, Path], name: str) -> tuple[Path, Path]:
    crt, key, csr, ext = (folder / f"{name}.{e}" for e in ("crt", "key", "csr", "ext"))
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
            "-out", csr, "-subj", "/CN=tas-scheduler")
    ext.write_text("extendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial", "-out", crt, "-days", "2",
            "-extfile", ext)
    return crt, key


def served_certificate(port: int) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw) as tls:
            return tls.getpeercert(binary_form=True)


def der(pem: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.read_text())


def verbs_accept(port: int, server_ca: Path, client: tuple[Path, Path]) -> bool:
    """Whether the verbs port completes a request with this client certificate (any HTTP answer counts)."""
    context = ssl.create_default_context(cafile=str(server_ca))
    context.check_hostname = False
    context.load_cert_chain(str(client[0]), str(client[1]))
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/scheduler/filter", context=context, timeout=5):
            return True
    except urllib.error.HTTPError:
        return True
    except (ssl.SSLError, ConnectionError, urllib.error.URLError):
        return False


def test_renewing_every_certificate_while_gangs_are_scheduled_refuses_nothing(rotation_cluster, request):
    cluster = rotation_cluster
    ns = conftest.TestNamespace(cluster, "rotation")
    request.addfinalizer(ns.close)
    ns.add_nodes(NODES)
    plane, folder = cluster.plane, cluster.plane.folder
    replicas = [r for r in cluster.extender.replicas if r.process]
    ca_pem = plane.certs.ca_crt.read_bytes()
    other_ca = new_ca(folder, "rotation-second-ca")
    other_client = client_cert(folder, other_ca, "rotation-second-client")
    assert not any(verbs_accept(r.verbs_port, plane.certs.ca_crt, other_client) for r in replicas)

    created: list[str] = []

    def submit() -> None:
        for i in range(JOBS):
            ns.apply(indexed_job(f"gang-{i}", PODS, GPUS, topology(required="rack"), segments(2, "rack")))
            created.append(f"gang-{i}")
            time.sleep(1.0)

    scheduler = next(p for p in plane.processes if p.name == "tas-scheduler")
    scheduler_log_before = scheduler.log.stat().st_size          # its start logs its own self-signed certificate
    submitter = threading.Thread(target=submit, daemon=True)
    submitter.start()
    time.sleep(3.0)
    # the renewal, as cert-manager or scripts/gen-webhook-cert.sh writes it: new leaves under the same CA, and a
    # client CA bundle that also trusts a second CA (the first step of a CA change)
    serving = plane.certs.issue("tas-extender-renewed", "/CN=tas-extender", server=True)
    client = plane.certs.issue("tas-scheduler-client-renewed", "/CN=tas-scheduler")
    bundle = ca_pem + other_ca[0].read_bytes()
    cluster.serving_secret.write({"tls.crt": serving[0].read_bytes(), "tls.key": serving[1].read_bytes(),
                                  "ca.crt": bundle})
    cluster.client_secret.write({"tls.crt": client[0].read_bytes(), "tls.key": client[1].read_bytes(),
                                 "ca.crt": bundle})
    renewed = der(serving[0])
    for replica in replicas:
        wait_until(lambda r=replica: served_certificate(r.port) == renewed, 60, f"{replica.name}'s renewed certificate")
        wait_until(lambda r=replica: served_certificate(r.verbs_port) == renewed, 60,
                   f"{replica.name}'s renewed verbs certificate")
        wait_until(lambda r=replica: verbs_accept(r.verbs_port, plane.certs.ca_crt, other_client), 60,
                   f"{replica.name} trusting the second CA")
    submitter.join(60)
    assert len(created) == JOBS

    for name in created:
        bound = cluster.wait_bound(ns.name, PODS, f"job-name={name}", timeout=120)
        assert len(distinct(cluster, bound, RACK)) == 1, f"{name} spans racks"
        for pod in bound:      # the webhook mutated every pod, before and after the renewal
            env = {e.name: e.value for c in pod.spec.containers for e in (c.env or [])}
            assert "KAI_SEGMENT_INDEX" in env, f"{pod.metadata.name} was admitted unmutated"
    refusals = [e.message for e in cluster.core.list_namespaced_event(ns.name).items
                if e.reason == "FailedScheduling" and TLS_ERRORS.search(e.message or "")]
    assert refusals == []
    since = scheduler.log.read_bytes()[scheduler_log_before:].decode(errors="replace")
    assert not [line for line in since.splitlines() if TLS_ERRORS.search(line)], scheduler.tail(40)
    for replica in replicas:
        assert replica.process.popen.poll() is None, f"{replica.name} restarted"
