"""A `tas-extender serve` process on free ports, and TLS files laid out as kubelet mounts a Secret (issue 40)."""
from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from cryptography import x509

from paths import TESTS

sys.path.insert(0, str(TESTS / "e2e"))
from controlplane import Certificates, free_port  # noqa: E402,F401 - the tests' certificate maker


class SecretDir:
    """Files of a Secret volume: `name -> ..data/name`, `..data -> ..<version>`; `update` swaps `..data` in one
    rename, as kubelet's atomic writer does."""

    def __init__(self, folder: Path, files: dict[str, Path]):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.version = 0
        self.update(files)
        for name in files:
            (folder / name).symlink_to(f"..data/{name}")

    def update(self, files: dict[str, Path]) -> None:
        self.version += 1
        version = self.folder / f"..v{self.version}"
        version.mkdir()
        for name, source in files.items():
            shutil.copyfile(source, version / name)
        link = self.folder / "..data_tmp"
        link.symlink_to(version.name)
        os.replace(link, self.folder / "..data")

    def __getitem__(self, name: str) -> str:
        return str(self.folder / name)


def client_context(ca: Path | str, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert:
        context.load_cert_chain(*map(str, cert))
    return context


def serial_of(pem_file: Path) -> int:
    return x509.load_pem_x509_certificate(pem_file.read_bytes()).serial_number


def peer_serial(tls_socket: ssl.SSLSocket) -> int:
    return x509.load_der_x509_certificate(tls_socket.getpeercert(binary_form=True)).serial_number


def tls_connect(port: int, context: ssl.SSLContext) -> ssl.SSLSocket:
    return context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                               server_hostname="127.0.0.1")


def http_get(sock: socket.socket, path: str) -> bytes:
    """One keep-alive GET on `sock`: its status line and body (the answers here are small)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return read_response(sock)


def http_post(sock: socket.socket, path: str, body: bytes) -> bytes:
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return read_response(sock)


def read_response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += sock.recv(65536)
    return head.split(b"\r\n")[0] + b"\r\n" + body


@contextmanager
def serving(*args: str, env: dict[str, str] | None = None, ready_context: ssl.SSLContext | None = None):
    """`tas-extender serve --host 127.0.0.1 --port P *args` until its /readyz answers: yields (process, P);
    its stderr (the log) is the process's `log` attribute once the block ends."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("TAS_", "KUBERNETES_"))}
    environment.update(env or {})
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                                *args], env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    scheme = "https" if ready_context else "http"
    import httpx
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{scheme}://127.0.0.1:{port}/readyz", verify=ready_context or True,
                             timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and process.poll() is None, process.stderr.read1().decode()
            time.sleep(0.1)
        yield process, port
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        process.log = process.stderr.read().decode()
