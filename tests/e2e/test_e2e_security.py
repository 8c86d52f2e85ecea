"""Only kube-scheduler may make the extender bind or evict (issue 33): the attacks of the issue, each refused on
the real control plane, while kube-scheduler, presenting its client certificate, places gangs as before.

The attacker calls the verbs port directly (as any pod that reaches the Service could). Where the attack needs
to get past the TLS handshake, it even presents kube-scheduler's own client certificate: the rules of the verbs
(decide from the API server's copy of the pod, bind only our scheduler's pods) hold on their own."""
from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request

import pytest

from workloads import container, indexed_job, topology

LOW = "e2e-security-low"
UNPLACEABLE = {"e2e.example.com/no-such-node": "true"}      # no node matches: no scheduler binds the pod


def post(cluster, verb: str, body: dict, certificate: bool = True) -> dict:
    """POST to the extender's verbs port, with kube-scheduler's client certificate or without any."""
    context = ssl.create_default_context(cafile=str(cluster.plane.certs.ca_crt))
    if certificate:
        context.load_cert_chain(*map(str, cluster.scheduler_client))
    request = urllib.request.Request(f"{cluster.verbs_url}/scheduler/{verb}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        return json.load(answer)


def pod_body(cluster, namespace: str, name: str) -> dict:
    return cluster.api.sanitize_for_serialization(cluster.core.read_namespaced_pod(name, namespace))


def pending_pod(name: str, scheduler: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": scheduler, "nodeSelector": UNPLACEABLE, "containers": [container()]}}


def eventually(check, timeout: float = 15):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


@pytest.fixture
def other(cluster, ns):
    """A second tenant's namespace."""
    name = f"{ns.name}-other"
    cluster.create_namespace(name)
    yield name
    cluster.clean_namespace(name)


def test_a_bind_without_a_client_certificate_fails_in_the_tls_handshake(cluster, ns):
    ns.add_nodes({"a0": ("zone-a", "block-a", "rack-a")})
    ns.apply(pending_pod("victim", "tas-scheduler"))
    uid = cluster.core.read_namespaced_pod("victim", ns.name).metadata.uid
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        post(cluster, "bind", {"PodName": "victim", "PodNamespace": ns.name, "PodUID": uid,
                               "Node": f"{ns.name}-a0"}, certificate=False)
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        post(cluster, "filter", {"Pod": pod_body(cluster, ns.name, "victim"), "NodeNames": [f"{ns.name}-a0"]},
             certificate=False)
    time.sleep(1)
    assert cluster.core.read_namespaced_pod("victim", ns.name).spec.node_name is None


def test_a_bind_of_a_default_scheduler_pod_of_another_namespace_is_refused(cluster, ns, other):
    ns.add_nodes({"a0": ("zone-a", "block-a", "rack-a")})
    cluster.apply([pending_pod("web", "default-scheduler")], namespace=other)
    uid = cluster.core.read_namespaced_pod("web", other).metadata.uid
    bind = {"PodName": "web", "PodNamespace": other, "PodUID": uid, "Node": f"{ns.name}-a0"}
    error = eventually(lambda: (lambda e: e if "not in the extender's watched view" not in e else "")(
        post(cluster, "bind", bind)["Error"]))
    assert error == (f"refusing to bind pod {other}/web: its spec.schedulerName is default-scheduler, and this "
                     f"extender binds only pods of tas-scheduler (--scheduler-name)")
    unknown = post(cluster, "bind", {**bind, "PodName": "never-created"})["Error"]
    assert unknown.endswith("it is not in the extender's watched view of the cluster")
    wrong_uid = post(cluster, "bind", {**bind, "PodUID": "00000000-0000-0000-0000-000000000000"})["Error"]
    assert "does not match the pod's UID" in wrong_uid
    time.sleep(1)
    assert cluster.core.read_namespaced_pod("web", other).spec.node_name is None


def test_a_forged_priority_in_filter_and_preempt_evicts_nothing(cluster, ns, other):
    """Tenant `ns` runs a low-priority gang on every node of a block (kube-scheduler placed it, with its
    certificate: the legitimate path works). The attacker in `other` creates a gang of the same priority,
    which does not fit and may not preempt, then sends its pod's body with spec.priority 1000000 to filter
    and preempt: nothing is evicted."""
    cluster.apply([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": LOW},
                    "value": 10, "description": "end-to-end tests"}])
    ns.add_nodes({f"a{n}": ("zone-a", "block-a", "rack-a") for n in range(4)})
    ns.apply(indexed_job("tenant", 4, 8, topology(required="block"), priority_class=LOW))
    placed = {p.metadata.name: p.spec.node_name for p in cluster.wait_bound(ns.name, 4, "job-name=tenant")}
    cluster.apply([indexed_job("attacker", 4, 8, topology(required="block"), priority_class=LOW)], namespace=other)
    attacker = eventually(lambda: [p for p in cluster.pods(other, "job-name=attacker")
                                   if p.metadata.annotations.get("batch.kubernetes.io/job-completion-index") == "0"])
    body = pod_body(cluster, other, attacker[0].metadata.name)
    assert body["spec"]["priority"] == 10
    body["spec"]["priority"] = 1_000_000
    nodes = list(placed.values())
    time.sleep(1)                                        # the extender's watch has the attacker's pods
    answer = post(cluster, "filter", {"Pod": body, "NodeNames": nodes})
    assert answer["NodeNames"] == []
    victims = {node: {"Pods": [{"UID": p.metadata.uid}], "NumPDBViolations": 0}
               for p in cluster.pods(ns.name, "job-name=tenant") for node in [p.spec.node_name]}
    assert post(cluster, "preempt", {"Pod": body, "NodeNameToMetaVictims": victims}) == {"NodeNameToMetaVictims": {}}
    time.sleep(3)                                        # an eviction would have been sent by now
    running = {p.metadata.name: p.spec.node_name for p in cluster.pods(ns.name, "job-name=tenant")
               if not p.metadata.deletion_timestamp}
    assert running == placed
    events = cluster.core.list_namespaced_event(ns.name).items
    assert not [e for e in events if e.reason in ("Preempted", "Evicted")]
    assert all(not p.spec.node_name for p in cluster.pods(other, "job-name=attacker"))
