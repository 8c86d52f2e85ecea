"""The whole end-to-end cluster: control plane, the extender installed from `manifests/`, two schedulers.

- `tas-scheduler`: kube-scheduler with the KubeSchedulerConfiguration that `manifests/` ships, its extender URL
  and CA rewritten to the test's; `default-scheduler`: a plain kube-scheduler beside it, as in a real cluster.
- The extender runs with the ServiceAccount and ClusterRole of `manifests/` (a token from the TokenRequest API),
  and is the pods' mutating webhook through the MutatingWebhookConfiguration of `manifests/`.
- GPU nodes are Node objects with a patched status, tainted `nvidia.com/gpu=present:NoSchedule`.
"""
from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from kubernetes import client as k8s
from kubernetes import config as kube_config

from app.kube import KubeApi, KubeSource
from app.state import POD_KIND
from controlplane import ControlPlane, write_kubeconfig
from grouper.expand import expand_pods
from secretvolume import SecretVolume
from service import REPO, Extender, ReadyProxy, Runtime

MANIFESTS = REPO / "manifests" / "base"
TOPOLOGY = "e2e"
LEVELS = ("e2e.example.com/zone", "e2e.example.com/block", "e2e.example.com/rack", "kubernetes.io/hostname")
ALIASES = ("zone", "block", "rack", "host")
GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}


def manifest(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((MANIFESTS / name).read_text()) if doc]


def scheduler_config(extender_url: str, ca_pem: bytes, client: tuple[Path, Path]) -> dict:
    """The shipped KubeSchedulerConfiguration, pointed at this test's extender: its CA, and the client
    certificate the extender's verbs port requires (files, as the shipped Secret mount gives them)."""
    (config_map,) = manifest("scheduler-config.yaml")
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    for extender in config["extenders"]:
        shipped = extender["tlsConfig"]
        assert set(shipped) == {"caFile", "certFile", "keyFile"}, shipped
        extender["urlPrefix"] = f"{extender_url}/scheduler"
        extender["tlsConfig"] = {"caData": base64.b64encode(ca_pem).decode(), "certFile": str(client[0]),
                                 "keyFile": str(client[1])}
    return config


def webhook_config(url: str, ca_pem: bytes) -> dict:
    """The shipped MutatingWebhookConfiguration, calling this test's extender directly."""
    (config,) = manifest("webhook.yaml")
    for hook in config["webhooks"]:
        hook["clientConfig"] = {"url": f"{url}/mutate", "caBundle": base64.b64encode(ca_pem).decode()}
    return config


class PodSink:
    """An ObjectSink of pods (app.kube.KubeSource lists and watches them) that only reads each pod as it is:
    a relist is every pod seen again. Subclasses define `apply`."""

    def replace(self, kind, objects) -> None:
        for pod in objects:
            self.apply(kind, "ADDED", pod)

    def apply(self, kind, event, pod) -> None:
        raise NotImplementedError

    def synced(self) -> None:
        pass


class DeletedPodsFinisher(PodSink):
    """What kubelets do for pods being deleted (evicted, preempted, their namespace gone): stop the
    containers and confirm; without it a deleted pod would hold its node's GPUs until its grace ends."""

    def __init__(self, finish: Callable[[str, str, str | None], None]):
        self.finish = finish

    def apply(self, kind, event, pod) -> None:
        metadata = pod.get("metadata") or {}
        if event != "DELETED" and metadata.get("deletionTimestamp") and (pod.get("spec") or {}).get("nodeName") \
                and metadata.get("namespace") != "tas-system":
            self.finish(metadata["name"], metadata["namespace"], (pod.get("status") or {}).get("phase"))


class PodSinks:
    """One list-and-watch of pods (app.kube.KubeSource) fanned out to every part of the harness that follows
    pods: the kubelet stand-in, and a benchmark's record of bindings while it runs."""

    def __init__(self, *sinks):
        self.sinks = tuple(sinks)

    def add(self, sink) -> None:
        self.sinks = (*self.sinks, sink)           # replaced whole: the watch thread reads it without a lock

    def remove(self, sink) -> None:
        self.sinks = tuple(s for s in self.sinks if s is not sink)

    def replace(self, kind, objects) -> None:
        for sink in self.sinks:
            sink.replace(kind, objects)

    def apply(self, kind, event, pod) -> None:
        for sink in self.sinks:
            sink.apply(kind, event, pod)

    def synced(self) -> None:
        for sink in self.sinks:
            sink.synced()


class E2ECluster:
    def __init__(self, plane: ControlPlane, replicas: int = 1, extender_args: tuple[str, ...] = (),
                 direct: bool = False, secret_volumes: bool = False, runtime: Runtime = Runtime()):
        self.plane = plane
        self.runtime = runtime        # what the extender replicas run (a previous release, for an upgrade)
        # the certificates as mounted Secrets (tests/e2e/secretvolume.py), which a test may renew in place
        self.secret_volumes = secret_volumes
        self.api = kube_config.new_client_from_config(config_file=str(plane.admin_kubeconfig))
        self.core = k8s.CoreV1Api(self.api)
        self.custom = k8s.CustomObjectsApi(self.api)
        self.replicas, self.extender_args = replicas, extender_args
        self.direct = direct          # the schedulers and the webhook call the first replica, not the proxy

    def install(self) -> "E2ECluster":
        plane = self.plane
        ca_pem = plane.certs.ca_crt.read_bytes()
        self.apply(yaml_docs(REPO / "manifests" / "crd" / "topology-crd.yaml")
                   + yaml_docs(Path(__file__).with_name("crds.yaml")))
        self.apply(manifest("namespace.yaml") + manifest("extender-rbac.yaml"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        self.apply([{"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": TOPOLOGY},
                     "spec": {"levels": [{"nodeLabel": label, "alias": alias}
                                        for label, alias in zip(LEVELS, ALIASES)]}}])
        token = plane.kubectl("-n", "tas-system", "create", "token", "tas-extender", "--duration=6h").strip()
        kubeconfig = write_kubeconfig(plane.folder / "tas-extender.kubeconfig", plane.server,
                                      plane.certs.ca_crt, token=token)
        serving = plane.certs.issue("tas-extender", "/CN=tas-extender", server=True)
        client_ca = plane.certs.ca_crt
        # kube-scheduler's client certificate for the verbs (manifests/: the Secret tas-scheduler-client-tls)
        self.scheduler_client = plane.certs.issue("tas-scheduler-extender-client", "/CN=tas-scheduler")
        if self.secret_volumes:
            self.serving_secret = SecretVolume(plane.folder / "tas-extender-tls", {
                "tls.crt": serving[0].read_bytes(), "tls.key": serving[1].read_bytes(), "ca.crt": ca_pem})
            self.client_secret = SecretVolume(plane.folder / "tas-scheduler-client-tls", {
                "tls.crt": self.scheduler_client[0].read_bytes(), "tls.key": self.scheduler_client[1].read_bytes(),
                "ca.crt": ca_pem})
            serving = self.serving_secret.path("tls.crt"), self.serving_secret.path("tls.key")
            client_ca = self.serving_secret.path("ca.crt")
            self.scheduler_client = self.client_secret.path("tls.crt"), self.client_secret.path("tls.key")
        self.extender = Extender(plane.folder, kubeconfig, serving, client_ca, self.replicas,
                                 self.extender_args, self.runtime)
        self.proxy = ReadyProxy(self.extender)
        self.verbs_proxy = ReadyProxy(self.extender, port_of=lambda replica: replica.verbs_port)
        first = self.extender.replicas[0]
        self.url = f"https://127.0.0.1:{first.port if self.direct else self.proxy.port}"
        self.verbs_url = f"https://127.0.0.1:{first.verbs_port if self.direct else self.verbs_proxy.port}"
        self.extender.start_all()
        self.apply([webhook_config(self.url, ca_pem)])
        plane.start_scheduler("tas-scheduler", scheduler_config(self.verbs_url, ca_pem, self.scheduler_client))
        plane.start_scheduler("default-scheduler", {
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": "default-scheduler"}]})
        # the kubelets' part in deletions, fed by the service's own list-and-watch of pods
        self.pod_sinks = PodSinks(DeletedPodsFinisher(self.finish_pod))
        self._kubelet = KubeSource(KubeApi(self.api), self.pod_sinks, [POD_KIND])
        self._kubelet.start()
        return self

    def finish_pod(self, name: str, namespace: str, phase: str | None) -> None:
        try:
            if phase not in ("Failed", "Succeeded"):
                self.core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Failed"}})
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except k8s.ApiException as err:
            if err.status != 404:
                print(f"kubelet stand-in: {namespace}/{name}: {err.status} {err.reason}")

    def stop(self) -> None:
        if hasattr(self, "_kubelet"):
            self._kubelet.stop()
        if hasattr(self, "extender"):
            self.extender.stop()
            self.proxy.close()
            self.verbs_proxy.close()

    # --- objects -------------------------------------------------------------------------------------------

    def create_namespace(self, name: str, timeout: float = 30) -> None:
        """A namespace, once its `default` ServiceAccount exists: until the controller manager makes it, the
        ServiceAccount admission plugin turns every pod of the namespace away."""
        self.core.create_namespace({"metadata": {"name": name}})
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.core.read_namespaced_service_account("default", name)
                return
            except k8s.ApiException as err:
                if err.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def apply(self, objects: list[dict], namespace: str | None = None) -> None:
        args = ["apply", "--server-side", "--force-conflicts", "-f", "-"]
        self.plane.kubectl(*(["-n", namespace] if namespace else []), *args,
                           stdin=yaml.safe_dump_all(objects))

    def create_with_pods(self, namespace: str, workload: dict) -> dict:
        """Create `workload`, then its pods as its operator would (the kubeflow training operator, the LWS
        controller: not running here), owned by the object as read back. Returns the stored object."""
        self.apply([workload], namespace=namespace)
        api_version, kind = workload["apiVersion"], workload["kind"]
        group, version = api_version.split("/")
        stored = self.custom.get_namespaced_custom_object(group, version, namespace, _plural(kind),
                                                          workload["metadata"]["name"])
        pods = expand_pods(stored)
        if kind == "LeaderWorkerSet":
            for pod in pods:        # no LWS controller makes the StatefulSets: the LWS owns its pods itself
                pod["metadata"]["ownerReferences"][0].update(apiVersion=api_version, kind=kind,
                                                             name=stored["metadata"]["name"])
        self.create_pods(namespace, pods)
        return stored

    def create_pods(self, namespace: str, pods: list[dict], timeout: float = 30) -> None:
        """Create pods, retrying those the webhook turns away for now (it has not seen their owner yet)."""
        deadline = time.monotonic() + timeout
        for pod in pods:
            pod["metadata"]["namespace"] = namespace
            while True:
                try:
                    self.core.create_namespaced_pod(namespace, pod)
                    break
                except k8s.ApiException as err:
                    if err.status == 409 or time.monotonic() > deadline:
                        raise
                    time.sleep(0.3)

    def add_gpu_nodes(self, names_and_domains: dict[str, tuple[str, str, str]], gpus: int | None = 8,
                      cpu: str = "64", memory: str = "512Gi", taint: bool = True,
                      labels: dict[str, str] | None = None) -> None:
        """Nodes `name -> (zone, block, rack)`, Ready, with `gpus` allocatable (none at all when None: a node
        whose GPUs are DRA devices) and the GPU taint."""
        def add(item):
            name, (zone, block, rack) = item
            node_labels = {**(labels or {}), **dict(zip(LEVELS, (zone, block, rack, name)))}
            self.core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name, labels=node_labels)))
            resources = {"cpu": cpu, "memory": memory, "pods": "110", **({GPU: str(gpus)} if gpus is not None else {})}
            self.core.patch_node_status(name, {"status": {
                "capacity": resources, "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True", "reason": "E2E",
                                "lastHeartbeatTime": now(), "lastTransitionTime": now()}]}})
            # Creating a node adds node.kubernetes.io/not-ready; with no kubelet nothing would remove it.
            self.core.patch_node(name, {"spec": {"taints": [GPU_TAINT] if taint else None}})
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(add, names_and_domains.items()))

    def publish_slices(self, node: str, slices: list[dict]) -> None:
        """A node's ResourceSlices as a DRA driver's kubelet plugin writes them: owned by the Node object, so
        that they go with it (the garbage collector deletes them when the node is deleted)."""
        owner = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": self.core.read_node(node).metadata.uid,
                 "controller": True}
        for resource_slice in slices:
            resource_slice["metadata"]["ownerReferences"] = [owner]
        self.apply(slices)

    def resource(self, plural: str, name: str, namespace: str | None = None) -> dict:
        """A resource.k8s.io/v1 object as the API server holds it (a dict)."""
        if namespace:
            return self.custom.get_namespaced_custom_object(DRA_GROUP, "v1", namespace, plural, name)
        return self.custom.get_cluster_custom_object(DRA_GROUP, "v1", plural, name)

    def resources(self, plural: str, namespace: str | None = None) -> list[dict]:
        if namespace:
            return self.custom.list_namespaced_custom_object(DRA_GROUP, "v1", namespace, plural)["items"]
        return self.custom.list_cluster_custom_object(DRA_GROUP, "v1", plural)["items"]

    def raw_pod(self, namespace: str, name: str) -> dict:
        """A pod as the API server returns it, every field kept (the client's models drop fields newer than
        themselves, such as status.extendedResourceClaimStatus)."""
        answer = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        return json.loads(answer.data)

    def set_ready(self, node: str, ready: bool) -> None:
        self.core.patch_node_status(node, {"status": {"conditions": [{
            "type": "Ready", "status": "True" if ready else "False", "reason": "E2E",
            "lastHeartbeatTime": now(), "lastTransitionTime": now()}]}})

    def delete_nodes(self, names) -> None:
        for name in names:
            self.core.delete_node(name, _preload_content=False)

    def pods(self, namespace: str, selector: str = "") -> list:
        return self.core.list_namespaced_pod(namespace, label_selector=selector).items

    def wait_bound(self, namespace: str, count: int, selector: str = "", timeout: float = 60) -> list:
        """At least `count` pods bound (spec.nodeName set); fails with the pods' scheduling messages."""
        deadline = time.monotonic() + timeout
        while True:
            pods = self.pods(namespace, selector)
            bound = [p for p in pods if p.spec.node_name]
            if len(bound) >= count:
                return bound
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(bound)} of {count} pods bound after {timeout:.0f} s in {namespace}; "
                                     f"{len(pods)} exist\n{self.describe(namespace)}")
            time.sleep(0.25)

    def describe(self, namespace: str) -> str:
        """Why pods wait: their PodScheduled conditions and the last events."""
        lines = []
        for pod in self.pods(namespace):
            scheduled = [c for c in (pod.status.conditions or []) if c.type == "PodScheduled"]
            message = scheduled[0].message if scheduled else ""
            lines.append(f"  {pod.metadata.name}: node={pod.spec.node_name} {message or ''}"[:300])
        events = self.core.list_namespaced_event(namespace).items[-8:]
        lines += [f"  event {e.reason}: {e.message}"[:300] for e in events]
        return "\n".join(lines)

    def clean_namespace(self, namespace: str) -> None:
        """Delete the namespace's workloads (so the extender drops their gangs' plans at once, instead of
        when the namespace controller reaches them), the namespace, then its pods at once (no kubelet
        finishes graceful deletion); wait until the extender holds no plan of the namespace, so that a
        gang of this test is not moved onto the next test's nodes when this test's nodes go."""
        self.plane.kubectl("delete", WORKLOAD_KINDS, "--all", "-n", namespace, "--wait=false", check=False)
        if self.plane.gates:          # native objects are served only with the gates on
            self.plane.kubectl("delete", NATIVE_KINDS, "--all", "-n", namespace, "--wait=false", check=False)
        self.plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        self._delete_pods(namespace)
        self._wait_no_plans(namespace)

    def debug(self, path: str, timeout: float = 5) -> dict:
        """A JSON answer of the leader's debug API (`path` below /debug/), on its loopback debug port."""
        leader = self.extender.leader() if not self.direct else self.extender.replicas[0]
        if leader is None:
            raise OSError("no tas-extender replica is ready")
        with urllib.request.urlopen(f"http://127.0.0.1:{leader.debug_port}/debug/{path}", timeout=timeout) as answer:
            return json.load(answer)

    def metrics(self, timeout: float = 5) -> str:
        """The extender's Prometheus /metrics text."""
        context = ssl.create_default_context(cafile=str(self.plane.certs.ca_crt))
        with urllib.request.urlopen(f"{self.url}/metrics", context=context, timeout=timeout) as answer:
            return answer.read().decode()

    def _wait_no_plans(self, namespace: str, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                gangs = [p["gang"] for p in self.debug("plans", timeout=2)["plans"]]
            except (OSError, ValueError, KeyError):
                return                                 # no leader serving (a failover test): nothing to wait for
            if not any(gang.startswith(f"{namespace}/") for gang in gangs):
                return
            time.sleep(0.2)

    def _delete_pods(self, namespace: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pods = self.pods(namespace)
            if not pods:
                return
            for pod in pods:
                try:
                    if pod.metadata.finalizers:        # the Job controller's tracking finalizer
                        self.core.patch_namespaced_pod(pod.metadata.name, namespace,
                                                       {"metadata": {"finalizers": None}})
                    self.core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
                except k8s.ApiException:
                    pass
            time.sleep(0.3)


# what the tests create that owns pods or gangs ("all" holds Jobs, ReplicaSets, StatefulSets, DaemonSets, ...)
WORKLOAD_KINDS = "all,tfjobs.kubeflow.org,leaderworkersets.leaderworkerset.x-k8s.io,podgroups.scheduling.run.ai"


NATIVE_KINDS = "podgroups.scheduling.k8s.io,workloads.scheduling.k8s.io"
DRA_GROUP = "resource.k8s.io"


def _plural(kind: str) -> str:
    return kind.lower() + "s"


def yaml_docs(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
