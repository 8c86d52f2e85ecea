"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

The binaries come from `TAS_K8S_ASSETS` (all five) or envtest's `KUBEBUILDER_ASSETS` (etcd, kube-apiserver,
kubectl; the scheduler and controller manager then come from TAS_K8S_ASSETS or PATH). Certificates are made
with openssl at start; every process is stopped by its own pid.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
# Native workload scheduling (v1.36 alpha, off by default): every component gets the gates, the API server
# also serves scheduling.k8s.io/v1alpha2 (Workload, PodGroup). TAS_E2E_GATES=on runs the whole suite so.
# Not WorkloadAwarePreemption: with it kube-scheduler runs no per-pod preemption for a gang pod ("preemption:
# not eligible due to workload aware preemption enabled"), so the extender's gang preemption is never asked.
NATIVE_GATES = "GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true,WorkloadWithJob=true"
NATIVE_RUNTIME_CONFIG = "scheduling.k8s.io/v1alpha2=true"


# DRA needs nothing on the command line in v1.36 (its feature gate defaults): DynamicResourceAllocation is GA
# and locked on, DRAExtendedResource (nvidia.com/gpu served by a DeviceClass) and DRAPartitionableDevices (MIG
# counters) are beta and on, DRAPrioritizedList (firstAvailable) is GA; resource.k8s.io/v1 is served by
# default. Only DRAWorkloadResourceClaims (a PodGroup's claims) is alpha and off.


def gates_from_env() -> bool:
    """Whether the session's control plane runs with the native gates on (TAS_E2E_GATES=on)."""
    value = os.environ.get("TAS_E2E_GATES", "off").lower()
    if value not in ("on", "off"):
        raise ValueError(f"TAS_E2E_GATES={value!r} is invalid; valid: on, off")
    return value == "on"
ADMISSION_PLUGINS = "Priority,LimitRanger,ExtendedResourceToleration,MutatingAdmissionWebhook"


def scheduler_verbosity() -> list[str]:
    """kube-scheduler's log level from TAS_E2E_SCHEDULER_V (0-10; unset: its default): -v=5 names the queue
    a pod is moved to and why, for a pod that waits with no attempt."""
    value = os.environ.get("TAS_E2E_SCHEDULER_V", "")
    if not value:
        return []
    if not value.isdigit() or int(value) > 10:
        raise ValueError(f"TAS_E2E_SCHEDULER_V={value!r} is invalid; valid: an integer from 0 to 10")
    return [f"-v={value}"]


def find_binaries() -> tuple[dict[str, Path], str | None]:
    """Each binary's path, or the reason the control plane cannot run here."""
    folders = [os.environ.get(name) for name in ("TAS_K8S_ASSETS", "KUBEBUILDER_ASSETS")]
    found: dict[str, Path] = {}
    for binary in BINARIES:
        for folder in filter(None, folders):
            if (Path(folder) / binary).is_file():
                found[binary] = Path(folder) / binary
                break
        else:
            on_path = shutil.which(binary)
            if on_path and any(folders):
                found[binary] = Path(on_path)
    if not any(folders):
        return found, "set TAS_K8S_ASSETS to a folder with the Kubernetes binaries to run the end-to-end tests"
    missing = [b for b in BINARIES if b not in found]
    if missing:
        return found, f"Kubernetes binaries not found in TAS_K8S_ASSETS/KUBEBUILDER_ASSETS or PATH: {', '.join(missing)}"
    if not shutil.which("openssl"):
        return found, "openssl is needed to make the control plane's certificates"
    return found, None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Certificates:
    """A CA and the certificates signed by it, as files in `folder`."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.ca_crt, self.ca_key = folder / "ca.crt", folder / "ca.key"
        self._openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                      "-keyout", self.ca_key, "-out", self.ca_crt, "-days", "2", "-subj", "/CN=e2e-ca")
        self.sa_key, self.sa_pub = folder / "sa.key", folder / "sa.pub"
        self._openssl("genrsa", "-out", self.sa_key, "2048")
        self._openssl("rsa", "-in", self.sa_key, "-pubout", "-out", self.sa_pub)

    def issue(self, name: str, subject: str, server: bool = False) -> tuple[Path, Path]:
        """A certificate for `subject` (`/CN=..[/O=..]`); server certificates name 127.0.0.1 and localhost."""
        crt, key, csr = (self.folder / f"{name}.{ext}" for ext in ("crt", "key", "csr"))
        self._openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                      "-keyout", key, "-out", csr, "-subj", subject)
        extensions = self.folder / f"{name}.ext"
        usage = "serverAuth" if server else "clientAuth"
        extensions.write_text(f"extendedKeyUsage={usage}\n"
                              + ("subjectAltName=IP:127.0.0.1,DNS:localhost\n" if server else ""))
        self._openssl("x509", "-req", "-in", csr, "-CA", self.ca_crt, "-CAkey", self.ca_key, "-CAcreateserial",
                      "-out", crt, "-days", "2", "-extfile", extensions)
        return crt, key

    @staticmethod
    def _openssl(*args) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def write_kubeconfig(path: Path, server: str, ca: Path, cert: Path | None = None, key: Path | None = None,
                     token: str | None = None) -> Path:
    user = {"token": token} if token else {"client-certificate": str(cert), "client-key": str(key)}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "e2e", "user": user}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
    }))
    return path


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path
    port: int | None = None              # its secure port, for a kube-scheduler

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def start(name: str, argv: list, folder: Path, env: dict | None = None) -> Process:
    log = folder / f"{name}.log"
    with open(log, "ab") as out:
        popen = subprocess.Popen([str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    return Process(name, popen, log)


def wait_until(check, timeout: float, what: str, process: Process | None = None, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.popen.poll() is not None:
            raise RuntimeError(f"{process.name} exited ({process.popen.returncode}):\n{process.tail()}")
        try:
            result = check()
            if result:
                return result
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(interval)
    raise TimeoutError(f"{what} not ready after {timeout:.0f} s" + (f":\n{process.tail()}" if process else ""))


def https_ok(url: str, ca: Path, cert: tuple[Path, Path] | None = None) -> bool:
    context = ssl.create_default_context(cafile=str(ca))
    if cert:
        context.load_cert_chain(*map(str, cert))
    with urllib.request.urlopen(url, context=context, timeout=2) as answer:
        return answer.status == 200


@dataclass
class ControlPlane:
    binaries: dict[str, Path]
    folder: Path
    processes: list[Process] = field(default_factory=list)
    server: str = ""
    admin_kubeconfig: Path | None = None
    gates: bool = False                  # native workload scheduling feature gates on every component
    extra_gates: str = ""                # more gates with them, e.g. "WorkloadAwarePreemption=true"
    manager_args: tuple = ()             # more kube-controller-manager flags (a benchmark's client rate)

    def _gate_args(self, apiserver: bool = False) -> list[str]:
        if not self.gates:
            return []
        gates = NATIVE_GATES + (f",{self.extra_gates}" if self.extra_gates else "")
        return ["--feature-gates", gates] + (["--runtime-config", NATIVE_RUNTIME_CONFIG] if apiserver else [])

    def start(self) -> "ControlPlane":
        self.certs = Certificates(self.folder / "pki")
        self._start_etcd()
        self._start_apiserver()
        self._start_controller_manager()
        return self

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        etcd = start("etcd", [
            self.binaries["etcd"], "--name", "e2e", "--data-dir", self.folder / "etcd",
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}", "--initial-cluster", f"e2e=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync", "--logger", "zap"], self.folder)
        self.processes.append(etcd)
        wait_until(lambda: urllib.request.urlopen(f"{self.etcd_url}/health", timeout=1).status == 200,
                   30, "etcd", etcd)

    def _start_apiserver(self) -> None:
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        serving = self.certs.issue("apiserver", "/CN=kube-apiserver", server=True)
        admin = self.certs.issue("admin", "/CN=e2e-admin/O=system:masters")
        apiserver = start("kube-apiserver", [
            self.binaries["kube-apiserver"], "--etcd-servers", self.etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", port,
            "--tls-cert-file", serving[0], "--tls-private-key-file", serving[1],
            "--client-ca-file", self.certs.ca_crt,
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", self.certs.sa_pub,
            "--service-account-signing-key-file", self.certs.sa_key,
            "--service-cluster-ip-range", "10.0.0.0/24", "--endpoint-reconciler-type", "none",
            "--authorization-mode", "Node,RBAC", "--enable-admission-plugins", ADMISSION_PLUGINS,
            *self._gate_args(apiserver=True)], self.folder)
        self.processes.append(apiserver)
        self.admin_kubeconfig = write_kubeconfig(self.folder / "admin.kubeconfig", self.server,
                                                 self.certs.ca_crt, *admin)
        wait_until(lambda: https_ok(f"{self.server}/readyz", self.certs.ca_crt, admin), 60,
                   "kube-apiserver", apiserver)

    def _start_controller_manager(self) -> None:
        kubeconfig = self.component_kubeconfig("kube-controller-manager", "system:kube-controller-manager")
        manager = start("kube-controller-manager", [
            self.binaries["kube-controller-manager"], "--kubeconfig", kubeconfig,
            "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
            "--service-account-private-key-file", self.certs.sa_key, "--root-ca-file", self.certs.ca_crt,
            "--use-service-account-credentials", "--leader-elect=false",
            "--bind-address", "127.0.0.1", "--secure-port", free_port(),
            # No kubelet: the node lifecycle controller would mark every node unreachable and evict its pods.
            "--controllers", "*,-node-lifecycle-controller", *self._gate_args(), *self.manager_args], self.folder)
        self.processes.append(manager)

    def component_kubeconfig(self, name: str, user: str) -> Path:
        cert = self.certs.issue(name, f"/CN={user}")
        return write_kubeconfig(self.folder / f"{name}.kubeconfig", self.server, self.certs.ca_crt, *cert)

    def start_scheduler(self, name: str, config: dict, args: tuple[str, ...] = ()) -> Process:
        """A kube-scheduler with this KubeSchedulerConfiguration (its client connection is filled in) and
        these flags besides."""
        kubeconfig = self.component_kubeconfig(f"{name}-client", "system:kube-scheduler")
        config = {**config, "clientConnection": {**config.get("clientConnection", {}), "kubeconfig": str(kubeconfig)},
                  "leaderElection": {"leaderElect": False}}
        path = self.folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        scheduler = start(name, [
            self.binaries["kube-scheduler"], "--config", path, "--bind-address", "127.0.0.1",
            "--secure-port", port, "--authentication-kubeconfig", kubeconfig,
            "--authorization-kubeconfig", kubeconfig, *self._gate_args(), *scheduler_verbosity(), *args], self.folder)
        scheduler.port = port
        self.processes.append(scheduler)
        context = _self_signed_context()
        wait_until(lambda: urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context,
                                                  timeout=2).status == 200, 60, name, scheduler)
        return scheduler

    def scheduler_metrics(self, scheduler: Process) -> str:
        """A kube-scheduler's /metrics, read as the admin (its serving certificate is self-signed)."""
        context = _self_signed_context()
        context.load_cert_chain(str(self.certs.folder / "admin.crt"), str(self.certs.folder / "admin.key"))
        with urllib.request.urlopen(f"https://127.0.0.1:{scheduler.port}/metrics", context=context,
                                    timeout=10) as answer:
            return answer.read().decode()

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        done = subprocess.run([str(self.binaries["kubectl"]), "--kubeconfig", str(self.admin_kubeconfig), *args],
                              input=stdin, capture_output=True, text=True, timeout=60)
        if check and done.returncode:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()


def _self_signed_context() -> ssl.SSLContext:
    """A client context for a kube-scheduler's own self-signed serving certificate."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context
