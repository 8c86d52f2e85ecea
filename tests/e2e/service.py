"""tas-extender replicas as subprocesses in cluster mode, behind a stand-in for their Kubernetes Service.

In a cluster, kube-scheduler and the API server reach the extender through a Service whose endpoints are the
Ready pods, and only the Lease holder reports Ready. `ReadyProxy` does the same on loopback: each new TCP
connection goes to the first replica whose /readyz answers 200 (TLS passes through untouched), preferring one
that is not being stopped, as kube-proxy uses a terminating pod's endpoint only while no other is ready.
"""
from __future__ import annotations

import os
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from controlplane import Process, free_port, start, wait_until

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Runtime:
    """What a replica runs: an interpreter and the source tree on its path (this checkout by default; a
    previous release's, tests/e2e/previous.py, for an upgrade)."""
    python: str = sys.executable
    source: Path = REPO


@dataclass
class Replica:
    name: str
    port: int                    # the webhook, probes and /metrics (TLS)
    # the extender verbs (TLS requiring kube-scheduler's client certificate)
    verbs_port: int = field(default_factory=free_port)
    # /debug and /ui, on loopback (what `kubectl port-forward` reaches in a cluster)
    debug_port: int = field(default_factory=free_port)
    process: Process | None = None
    runtime: Runtime = Runtime()
    terminating: bool = False    # sent SIGTERM (its endpoint is a fallback only)

    def ready(self, ca: Path) -> bool:
        context = ssl.create_default_context(cafile=str(ca))
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/readyz", context=context,
                                        timeout=1) as answer:
                return answer.status == 200
        except Exception:  # noqa: BLE001 - down, standby or syncing
            return False


class Extender:
    """Replicas of `tas-extender serve --kubeconfig ... --leader-elect` with one serving certificate; the verbs
    accept only callers with a client certificate signed by `ca` (the control plane's CA here)."""

    def __init__(self, folder: Path, kubeconfig: Path, cert: tuple[Path, Path], ca: Path, replicas: int = 1,
                 extra_args: tuple[str, ...] = (), runtime: Runtime = Runtime()):
        self.folder, self.kubeconfig, self.cert, self.ca = folder, kubeconfig, cert, ca
        self.extra_args = extra_args
        self.replicas = [Replica(f"tas-extender-{i}", free_port(), runtime=runtime) for i in range(replicas)]

    def add(self, runtime: Runtime = Runtime()) -> Replica:
        """One more replica (not started), as a rollout's new pod."""
        replica = Replica(f"tas-extender-{len(self.replicas)}", free_port(), runtime=runtime)
        self.replicas.append(replica)
        return replica

    def start(self, replica: Replica) -> None:
        # -P: the source tree comes from PYTHONPATH alone, not from the working directory (this checkout)
        argv = [replica.runtime.python, "-P", "-m", "app.cli", "serve", "--kubeconfig", self.kubeconfig,
                "--host", "127.0.0.1", "--port", replica.port,
                "--tls-cert", self.cert[0], "--tls-key", self.cert[1],
                "--client-ca", self.ca, "--verbs-port", replica.verbs_port, "--debug-port", replica.debug_port,
                "--leader-elect", "--lease-namespace", "tas-system", "--lease-name", "tas-extender",
                "--scheduler-name", "tas-scheduler", "--log-level", "info", *self.extra_args]
        env = {"PATH": "/usr/bin:/bin", "POD_NAME": replica.name, "PYTHONPATH": str(replica.runtime.source),
               "HOME": str(self.folder),
               # a leader being stopped waits this long for a successor (a previous release ignores it): a
               # loaded 2-core machine took 14 s to start a replica; Extender.stop()'s second SIGTERM ends it;
               # TAS_E2E_HANDOVER_TIMEOUT=0 stops it as soon as it has released its Lease
               "TAS_HANDOVER_TIMEOUT": os.environ.get("TAS_E2E_HANDOVER_TIMEOUT", "60"), "TAS_HANDOVER_DRAIN": "1"}
        wrap = os.environ.get("TAS_E2E_WRAP", "").split()    # a profiler launching the service (benchmarks)
        replica.terminating = False
        replica.process = start(replica.name, [*wrap, *argv], self.folder, env=env)

    def start_all(self) -> None:
        for replica in self.replicas:
            self.start(replica)
        self.wait_leader()

    def wait_leader(self, timeout: float = 60) -> Replica:
        return wait_until(self.leader, timeout, "a ready tas-extender replica", interval=0.2)

    def leader(self) -> Replica | None:
        """The replica the Service routes to: a ready one, one that is not being stopped first."""
        running = [r for r in self.replicas if r.process and r.process.popen.poll() is None]
        for replica in sorted(running, key=lambda r: r.terminating):
            if replica.ready(self.ca):
                return replica
        return None

    def kill(self, replica: Replica) -> None:
        """As a node failure or OOM kill would: no chance to release the Lease."""
        replica.process.stop(signal.SIGKILL)

    def terminate(self, replica: Replica) -> None:
        """As the kubelet stops a pod: SIGTERM, not waiting (`replica.process.stop()` waits)."""
        replica.terminating = True
        replica.process.popen.send_signal(signal.SIGTERM)

    def stop_replica(self, replica: Replica) -> None:
        """Stop one replica now, waiting for it: a second SIGTERM ends a leader's hand-over (for a restart, or
        when nobody would take over)."""
        self.terminate(replica)
        time.sleep(0.2)
        replica.process.stop()

    def stop(self) -> None:
        """Every replica, at once."""
        running = [r for r in self.replicas if r.process and r.process.popen.poll() is None]
        for replica in running:
            self.terminate(replica)
        time.sleep(0.2)
        for replica in running:
            replica.process.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {r.name}\n{r.process.tail(40)}" for r in self.replicas if r.process)


class ReadyProxy:
    """A TCP listener that forwards each connection to the extender's current leader (its main port, or the
    port `port_of` names: the verbs port)."""

    def __init__(self, extender: Extender, port_of=lambda replica: replica.port):
        self.extender = extender
        self.port_of = port_of
        self.port = free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._chosen: tuple[float, Replica | None] = (0.0, None)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="ready-proxy").start()

    def _backend(self) -> Replica | None:
        when, replica = self._chosen
        if replica is None or time.monotonic() - when > 0.5:
            replica = self.extender.leader()
            self._chosen = (time.monotonic(), replica)
        return replica

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        replica = self._backend()
        if replica is None:
            client.close()
            return
        try:
            backend = socket.create_connection(("127.0.0.1", self.port_of(replica)), timeout=5)
        except OSError:
            self._chosen = (0.0, None)
            client.close()
            return
        backend.settimeout(None)
        threading.Thread(target=_pump, args=(backend, client), daemon=True).start()
        _pump(client, backend)

    def close(self) -> None:
        self._closed = True
        self._listener.close()


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
