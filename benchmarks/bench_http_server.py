"""The HTTP and TLS server (issue 39's lever): uvicorn (h11/httptools and Python's ssl, on uvloop) against
granian (HTTP and TLS in Rust, running the same ASGI app), side by side in one run.

    python benchmarks/bench_http_server.py              # 3 alternated rounds of 8 s per server and case
    python benchmarks/bench_http_server.py --rounds 5 --seconds 15
    python benchmarks/bench_http_server.py --servers uvicorn+apart+tickets,uvicorn   # before and after issue 39's pass

The service is the real app (`create_app`, the standalone demo) in a process of its own, serving the
webhook on its TLS port and the verbs on their mutual-TLS port (--client-ca), as in a cluster. The load
comes from this process as kube-scheduler's Go client sends it: 2 kept-alive connections (Go's
MaxIdleConnsPerHost), each sending its next request when the last is answered. Figures per case: the
service process's CPU per request (all its threads, from /proc), and p50/p99 latency as the client sees it
(the same client for both servers). granian needs `pip install granian` (not a dependency of the service).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "web", "namespace": "default", "uid": "uid-web"},
       "spec": {"containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}
REVIEW = orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                   "resource": {"group": "", "version": "v1", "resource": "pods"},
                                   "namespace": "default", "operation": "CREATE", "object": POD}})
FILTER = orjson.dumps({"Pod": POD, "NodeNames": [f"node-{i:02d}" for i in range(1, 33)]})
CASES = {"webhook (TLS)": ("main", "/mutate", REVIEW), "filter (mutual TLS)": ("verbs", "/scheduler/filter", FILTER),
         # kube-scheduler keeps 2 idle connections while more binds run at once: the others are new each time
         "filter, new connection": ("verbs", "/scheduler/filter", FILTER)}


def serve(server: str, port: int, verbs_port: int, cert: str, key: str, ca: str) -> None:
    """The child: the service's apps under `server` until killed."""
    from app.server import create_app
    from app.settings import Settings
    settings = Settings(host="127.0.0.1", port=port, verbs_port=verbs_port, tls_cert=cert, tls_key=key,
                        client_ca=ca, log_level="warning")
    if server.startswith("uvicorn"):
        from app import certificates, listeners
        if "+apart" in server:        # each write of a response sent as it comes (head, then body)
            listeners.TimedHttpProtocol.connection_made = lambda self, transport: (
                listeners.HttpToolsProtocol.connection_made(self, transport), setattr(
                    self, "_deadline", self.loop.call_later(self.request_timeout, self._request_too_slow)))
        if "+tickets" in server:      # OpenSSL's 2 TLS 1.3 session tickets after each handshake
            certificates.NUM_TICKETS = 2
        app = create_app(settings, serving=True)
        listeners.run(app, settings)
        return
    app = create_app(settings, serving=True)
    if server == "hypercorn":
        hypercorn(app, port, verbs_port, cert, key, ca)
        return
    from granian.constants import Interfaces
    from granian.server.embed import Server

    import uvloop

    async def main():
        main_server = Server(app, "127.0.0.1", port, interface=Interfaces.ASGI, ssl_cert=Path(cert),
                             ssl_key=Path(key), log_level="warning")
        verbs = Server(app.state.listeners["verbs"], "127.0.0.1", verbs_port, interface=Interfaces.ASGINL,
                       ssl_cert=Path(cert), ssl_key=Path(key), ssl_ca=Path(ca), ssl_client_verify=True,
                       log_level="warning")
        await asyncio.gather(main_server.serve(), verbs.serve())
    uvloop.run(main())


def hypercorn(app, port: int, verbs_port: int, cert: str, key: str, ca: str) -> None:
    """Both listeners under hypercorn, offering HTTP/2 by ALPN (`pip install hypercorn`; not a dependency):
    a Go client then sends all its requests over one connection, however many are in flight."""
    import ssl

    import uvloop
    from hypercorn.asyncio import serve as serve_hypercorn
    from hypercorn.config import Config

    def config(listen: int, mutual: bool) -> Config:
        config = Config()
        config.bind = [f"127.0.0.1:{listen}"]
        config.certfile, config.keyfile = cert, key
        if mutual:
            config.ca_certs, config.verify_mode = ca, ssl.CERT_REQUIRED
        config.alpn_protocols = ["h2", "http/1.1"]
        config.keep_alive_timeout = 120
        config.loglevel = "WARNING"
        return config

    async def main():
        await asyncio.gather(serve_hypercorn(app, config(port, False)),
                             serve_hypercorn(app.state.listeners["verbs"], config(verbs_port, True)))
    uvloop.run(main())


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(url: str, body: bytes, context, seconds: float, new: bool = False, http2: bool = False) -> list[float]:
    """2 kept-alive connections, each sending its next request when the last is answered (`new`: each request
    on a connection of its own, with its TLS handshake): latencies."""
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    shared = httpx.Client(verify=context, http2=True) if http2 else None    # one connection, 2 streams at a time

    def connection():
        if shared is not None:
            shared.post(url, content=body, headers={"Content-Type": "application/json"})
            while time.monotonic() < stop:
                started = time.perf_counter()
                answer = shared.post(url, content=body, headers={"Content-Type": "application/json"})
                latencies.append(time.perf_counter() - started)
                assert answer.status_code == 200 and answer.http_version == "HTTP/2", answer.text
            return
        if new:
            while time.monotonic() < stop:
                started = time.perf_counter()
                with httpx.Client(verify=context, http2=False) as client:
                    answer = client.post(url, content=body, headers={"Content-Type": "application/json"})
                latencies.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text
            return
        with httpx.Client(verify=context, http2=False, limits=httpx.Limits(max_connections=1)) as client:
            client.post(url, content=body, headers={"Content-Type": "application/json"})      # the handshake
            while time.monotonic() < stop:
                started = time.perf_counter()
                answer = client.post(url, content=body, headers={"Content-Type": "application/json"})
                latencies.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text
    threads = [threading.Thread(target=connection) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def start(server: str, files, ports) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, __file__, "--serve", server, *map(str, ports), *map(str, files)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import ssl
    context = ssl.create_default_context(cafile=str(files[2]))
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(f"https://127.0.0.1:{ports[0]}/readyz", verify=context).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline and process.poll() is None, f"{server} did not start"
        time.sleep(0.2)


def measure(rounds: int, seconds: float, servers: tuple[str, str] = ("uvicorn", "granian")) -> None:
    import ssl

    from controlplane import Certificates, free_port
    folder = Path(tempfile.mkdtemp(prefix="bench-http-"))
    certs = Certificates(folder)
    cert, key = certs.issue("serving", "/CN=tas-extender", server=True)
    client = certs.issue("scheduler", "/CN=tas-scheduler")
    trust = ssl.create_default_context(cafile=str(certs.ca_crt))
    mutual = ssl.create_default_context(cafile=str(certs.ca_crt))
    mutual.load_cert_chain(*map(str, client))
    results: dict[tuple[str, str], list[tuple[float, float, float, int]]] = {}
    for round_ in range(rounds):
        for server in (servers if round_ % 2 == 0 else servers[::-1]):
            ports = (free_port(), free_port())
            process = start(server, (cert, key, certs.ca_crt), ports)
            try:
                for case, (listener, path, body) in CASES.items():
                    port = ports[0] if listener == "main" else ports[1]
                    url = f"https://127.0.0.1:{port}{path}"
                    new, http2 = "new connection" in case, server == "hypercorn"   # HTTP/2: never a new one
                    load(url, body, trust if listener == "main" else mutual, 1.0, new, http2)           # warm up
                    before = cpu_seconds(process.pid)
                    latencies = load(url, body, trust if listener == "main" else mutual, seconds, new, http2)
                    cpu = cpu_seconds(process.pid) - before
                    latencies.sort()
                    results.setdefault((case, server), []).append(
                        (cpu / len(latencies) * 1e3, latencies[len(latencies) // 2] * 1e3,
                         latencies[int(len(latencies) * 0.99)] * 1e3, len(latencies)))
            finally:
                process.kill()
                process.wait()
    print(f"{rounds} rounds x {seconds:g} s per server and case, servers alternated; medians over rounds")
    print(f"{'case':22} {'server':8} {'CPU ms/req':>10} {'p50 ms':>7} {'p99 ms':>7} {'req/s':>7}")
    for (case, server), rows in results.items():
        cpu, p50, p99 = (statistics.median(r[i] for r in rows) for i in range(3))
        rate = statistics.median(r[3] for r in rows) / seconds
        print(f"{case:22} {server:8} {cpu:10.3f} {p50:7.2f} {p99:7.2f} {rate:7.0f}")
    for case in CASES:
        u, g = (statistics.median(r[0] for r in results[(case, s)]) for s in servers)
        print(f"verdict {case}: {servers[1]}'s CPU per request is {g / u:.2f}x {servers[0]}'s")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        server, port, verbs_port, cert, key, ca = sys.argv[2:8]
        serve(server, int(port), int(verbs_port), cert, key, ca)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--servers", default="uvicorn,granian", help="the two servers compared: uvicorn (as "
                        "`serve` runs it), granian, or uvicorn as it was before issue 39's second pass: "
                        "uvicorn+apart (a response's head and body in two writes), uvicorn+tickets (2 TLS session "
                        "tickets after each handshake), uvicorn+apart+tickets; or hypercorn over HTTP/2 (its client "
                        "then multiplexes every request on one connection, as Go's does)")
    args = parser.parse_args()
    servers = tuple(args.servers.split(","))
    valid = {"uvicorn", "granian", "hypercorn", "uvicorn+apart", "uvicorn+tickets", "uvicorn+apart+tickets"}
    if len(servers) != 2 or not set(servers) <= valid:
        parser.error(f"--servers {args.servers}: two of {', '.join(sorted(valid))}")
    measure(args.rounds, args.seconds, servers)


if __name__ == "__main__":
    main()
