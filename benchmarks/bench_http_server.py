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

Issue 39's third pass (HTTP/2 on the verbs port):

    python benchmarks/bench_http_server.py --servers uvicorn,granian+h2 --cases filter,new,mix --in-flight 4 --rate 150

`granian+h2` is the service with its verbs port on granian (benchmarks/granian_verbs.py), reached over HTTP/2:
one connection, --in-flight streams at once; uvicorn's verbs are reached over HTTP/1.1, --in-flight kept
connections, or a new connection per request (`new`), or the share of new connections the real loop shows
(`mix`: 0.7 per 2.07 verb calls). `--rate` paces the requests in bursts of --in-flight, as a gang's binds
arrive. The last lines give the service's CPU per gang pod: 2.07 calls and 0.7 handshakes over HTTP/1.1,
2.07 calls over HTTP/2.
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
         "filter, new connection": ("verbs", "/scheduler/filter", FILTER),
         # what the real loop shows (issue 39 second pass): 0.7 new connections per 2.07 verb calls
         "filter, loop mix": ("verbs", "/scheduler/filter", FILTER)}
MIX_NEW = 0.7 / 2.07             # share of verb calls that open a new connection on the real loop
CALLS_PER_GANG_POD = 2.07        # filter 1.07 + bind 1.00 (issue 39 second pass)
NEW_PER_GANG_POD = 0.7
HTTP2 = ("granian+h2", "hypercorn")   # servers the client reaches over HTTP/2: one connection, every stream on it


def serve(server: str, port: int, verbs_port: int, cert: str, key: str, ca: str) -> None:
    """The child: the service's apps under `server` until killed."""
    from app.server import create_app
    from app.settings import Settings
    settings = Settings(host="127.0.0.1", port=port, verbs_port=verbs_port, tls_cert=cert, tls_key=key,
                        client_ca=ca, log_level="warning")
    if server == "granian+h2":       # as bench_e2e.py --verbs-server granian runs the service
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import granian_verbs

        from app import listeners
        granian_verbs.install()
        listeners.run(create_app(settings, serving=True), settings)
        return
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


def paced(rate: float, in_flight: int):
    """Waits until the next slot of `rate` requests/s sent `in_flight` at once (0: no pacing): every client
    of a burst fires together, as a gang's overlapping binds do."""
    if not rate:
        return None
    period, start_at = in_flight / rate, time.monotonic()

    def slot(sent: int) -> float:
        return max(0.0, start_at + sent * period - time.monotonic())
    return slot


def load(url: str, body: bytes, context, seconds: float, new: float = 0.0, http2: bool = False,
         in_flight: int = 2, rate: float = 0.0) -> list[float]:
    """`in_flight` clients, each sending its next request when the last is answered: over HTTP/1.1 each on a
    kept-alive connection of its own, except a share `new` of the requests (1.0: all) each on a connection of
    its own with its TLS handshake; over HTTP/2 (`http2`) all of them as streams of ONE connection, as Go's
    transport multiplexes them. `rate`: requests/s in bursts of `in_flight` (0: each sends when answered).
    Returns the latencies."""
    latencies: list[float] = []
    stop = time.monotonic() + seconds
    headers = {"Content-Type": "application/json"}

    if http2:
        return asyncio.run(load_http2(url, body, context, stop, in_flight, paced(rate, in_flight)))
    slot = paced(rate, in_flight)

    def connection():
        with httpx.Client(verify=context, http2=False, limits=httpx.Limits(max_connections=1)) as client:
            if new < 1.0:
                client.post(url, content=body, headers=headers)      # the handshake
            sent = 0
            while time.monotonic() < stop:
                if slot is not None:
                    time.sleep(slot(sent))
                sent += 1
                started = time.perf_counter()
                if int(sent * new) != int((sent - 1) * new):       # this one on a new connection
                    with httpx.Client(verify=context, http2=False) as fresh:
                        answer = fresh.post(url, content=body, headers=headers)
                else:
                    answer = client.post(url, content=body, headers=headers)
                latencies.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text
    threads = [threading.Thread(target=connection) for _ in range(in_flight)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


async def load_http2(url: str, body: bytes, context, stop: float, in_flight: int, slot=None) -> list[float]:
    """`in_flight` requests at a time as streams of one HTTP/2 connection (an asyncio client: httpx's sync
    HTTP/2 client shared by threads is slower and lost its connection under this load)."""
    latencies: list[float] = []
    headers = {"Content-Type": "application/json"}
    async with httpx.AsyncClient(verify=context, http2=True, limits=httpx.Limits(max_connections=1)) as client:
        answer = await client.post(url, content=body, headers=headers)     # the handshake, before the streams
        assert answer.http_version == "HTTP/2", answer.http_version

        async def stream():
            sent = 0
            while time.monotonic() < stop:
                if slot is not None:
                    await asyncio.sleep(slot(sent))
                sent += 1
                started = time.perf_counter()
                answer = await client.post(url, content=body, headers=headers)
                latencies.append(time.perf_counter() - started)
                assert answer.status_code == 200 and answer.http_version == "HTTP/2", answer.text
        await asyncio.gather(*(stream() for _ in range(in_flight)))
        connections = len(client._transport._pool.connections)      # noqa: SLF001 - the proof of one connection
    assert connections == 1, f"the HTTP/2 client opened {connections} connections"
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


def measure(rounds: int, seconds: float, servers: tuple[str, str] = ("uvicorn", "granian"),
            cases: tuple[str, ...] = tuple(CASES)[:3], in_flight: int = 2, rate: float = 0.0) -> None:
    import ssl

    from controlplane import Certificates, free_port
    folder = Path(tempfile.mkdtemp(prefix="bench-http-"))
    certs = Certificates(folder)
    cert, key = certs.issue("serving", "/CN=tas-extender", server=True)
    client = certs.issue("scheduler", "/CN=tas-scheduler")
    trust = ssl.create_default_context(cafile=str(certs.ca_crt))
    results: dict[tuple[str, str], list[tuple[float, float, float, int]]] = {}
    for round_ in range(rounds):
        for server in (servers if round_ % 2 == 0 else servers[::-1]):
            ports = (free_port(), free_port())
            process = start(server, (cert, key, certs.ca_crt), ports)
            try:
                for case in cases:
                    listener, path, body = CASES[case]
                    http2 = server == "hypercorn" or (server in HTTP2 and listener == "verbs")
                    if http2 and ("new connection" in case or "mix" in case):   # HTTP/2 keeps its one connection
                        continue
                    new = 0.0 if http2 else 1.0 if "new connection" in case else MIX_NEW if "mix" in case else 0.0
                    mutual = ssl.create_default_context(cafile=str(certs.ca_crt))
                    mutual.load_cert_chain(*map(str, client))
                    port = ports[0] if listener == "main" else ports[1]
                    url = f"https://127.0.0.1:{port}{path}"
                    context = trust if listener == "main" else mutual
                    flight = in_flight if listener == "verbs" else 2
                    pace = rate if listener == "verbs" else 0.0
                    load(url, body, context, 1.0, new, http2, flight, pace)           # warm up
                    before = cpu_seconds(process.pid)
                    latencies = load(url, body, context, seconds, new, http2, flight, pace)
                    cpu = cpu_seconds(process.pid) - before
                    latencies.sort()
                    row = (cpu / len(latencies) * 1e3, latencies[len(latencies) // 2] * 1e3,
                           latencies[int(len(latencies) * 0.99)] * 1e3, len(latencies))
                    results.setdefault((case, server), []).append(row)
                    print(f"round {round_ + 1} {server:12} {case:24} {'h2' if http2 else 'h1.1'} x{flight}: "
                          f"{row[0]:.3f} ms CPU/request, {row[3] / seconds:.0f} req/s, "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
            finally:
                process.kill()
                process.wait()
    print(f"\n{rounds} rounds x {seconds:g} s per server and case, servers alternated; medians over rounds; "
          f"verbs: {in_flight} in flight" + (f", {rate:g} requests/s in bursts" if rate else ""))
    print(f"{'case':24} {'server':12} {'CPU ms/req':>10} {'p50 ms':>7} {'p99 ms':>7} {'req/s':>7}")
    median = {}
    for (case, server), rows in results.items():
        cpu, p50, p99 = (statistics.median(r[i] for r in rows) for i in range(3))
        median[(case, server)] = cpu
        rate = statistics.median(r[3] for r in rows) / seconds
        print(f"{case:24} {server:12} {cpu:10.3f} {p50:7.2f} {p99:7.2f} {rate:7.0f}")
    for case in cases:
        if all((case, s) in median for s in servers):
            u, g = (median[(case, s)] for s in servers)
            print(f"verdict {case}: {servers[1]}'s CPU per request is {g / u:.2f}x {servers[0]}'s")
    # per gang pod: 2.07 verb calls; over HTTP/1.1 0.7 of them on a new connection, over HTTP/2 none
    per_pod = {}
    for server in servers:
        kept, fresh, mix = (median.get((c, server)) for c in ("filter (mutual TLS)", "filter, new connection",
                                                               "filter, loop mix"))
        if server in HTTP2 and kept is not None:
            per_pod[server] = CALLS_PER_GANG_POD * kept
            print(f"per gang pod {server}: {CALLS_PER_GANG_POD} h2 calls = {per_pod[server]:.2f} ms")
            continue
        parts = []
        if kept is not None and fresh is not None:
            per_pod[server] = CALLS_PER_GANG_POD * kept + NEW_PER_GANG_POD * (fresh - kept)
            parts.append(f"{CALLS_PER_GANG_POD} calls + {NEW_PER_GANG_POD} handshakes = {per_pod[server]:.2f} ms")
        if mix is not None:
            per_pod.setdefault(server, CALLS_PER_GANG_POD * mix)
            parts.append(f"the loop mix x {CALLS_PER_GANG_POD} = {CALLS_PER_GANG_POD * mix:.2f} ms")
        if parts:
            print(f"per gang pod {server}: " + "; ".join(parts))
    if len(per_pod) == 2:
        a, b = (per_pod[s] for s in servers)
        print(f"verdict per gang pod: {servers[1]} {b:.2f} ms against {servers[0]} {a:.2f} ms ({b - a:+.2f} ms)")


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
                        "then multiplexes every request on one connection, as Go's does), granian+h2 (the "
                        "service with its verbs on granian, benchmarks/granian_verbs.py, reached over HTTP/2 on one "
                        "connection)")
    parser.add_argument("--cases", default="webhook,filter,new", help="comma-separated, of: webhook, filter "
                        "(kept connections), new (a new connection per request), mix (the real loop's share of "
                        "new connections: 0.7 per 2.07 verb calls)")
    parser.add_argument("--in-flight", type=int, default=2, help="verb requests in flight at once (default 2, "
                        "kube-scheduler's idle connections; overlapping binds: 4)")
    parser.add_argument("--rate", type=float, default=0.0, help="verb requests/s, sent --in-flight at once "
                        "(default 0: each client sends when answered); the real loop's gang rounds make 120-200")
    args = parser.parse_args()
    servers = tuple(args.servers.split(","))
    valid = {"uvicorn", "granian", "granian+h2", "hypercorn", "uvicorn+apart", "uvicorn+tickets",
             "uvicorn+apart+tickets"}
    if len(servers) != 2 or not set(servers) <= valid:
        parser.error(f"--servers {args.servers}: two of {', '.join(sorted(valid))}")
    names = dict(zip(("webhook", "filter", "new", "mix"), CASES))
    cases = tuple(args.cases.split(","))
    if not set(cases) <= set(names):
        parser.error(f"--cases {args.cases}: comma-separated, of {', '.join(names)}")
    measure(args.rounds, args.seconds, servers, tuple(names[c] for c in cases), args.in_flight, args.rate)


if __name__ == "__main__":
    main()
