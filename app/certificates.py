"""The listeners' TLS files, reloaded while the service runs (issue 40).

cert-manager renews the serving certificate every 60-75 days and the rotation script renews the client CA's
leaves; a Secret mounted in the pod changes by kubelet swapping its `..data` symlink, so the files change
under the same names. `TlsFiles` owns what the listeners serve: it polls the files (a stat of each, and a
hash of their bytes only when a stat differs), and on a change builds fresh SSL contexts. The context each
listener was started with keeps a server-name callback that moves every new handshake onto the newest
context (OpenSSL calls it for every ClientHello, with or without SNI), so new connections use the new
certificate and client CA at once while open connections finish on the old ones. A change that does not
load (a key that does not match yet) keeps the previous contexts and is logged; the next change is tried.

Each certificate's notAfter is a Prometheus gauge, and `problem()` is what /readyz says once the serving
certificate is within --tls-expiry-margin of its end.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from cryptography import x509
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .logs import fields, get_logger

log = get_logger(__name__)

# how often the files are looked at; kubelet itself refreshes a mounted Secret about once a minute
CHECK_INTERVAL = 5.0
# TLS 1.3 session tickets sent after each handshake (OpenSSL sends 2). The callers are Go clients that keep no
# session cache (kube-scheduler's extender client, the API server's webhook client, the kubelet's probes), so
# a ticket is never used to resume: making and sending them is work on every new connection, and
# kube-scheduler opens many (issue 39: it keeps 2 idle connections while binds run in parallel).
NUM_TICKETS = 0


@dataclass(frozen=True)
class Certificate:
    role: str            # serving | client-ca
    file: str
    subject: str
    serial: str
    not_after: float     # seconds since the epoch


def certificates_in(role: str, path: str, pem: bytes) -> list[Certificate]:
    """Every certificate of a PEM file (a serving chain: the leaf first; a CA bundle: old and new CA)."""
    return [Certificate(role, path, cert.subject.rfc4514_string(), format(cert.serial_number, "x"),
                        cert.not_valid_after_utc.timestamp())
            for cert in x509.load_pem_x509_certificates(pem)]


def _stat(path: str) -> tuple:
    try:
        found = os.stat(path)            # follows the ..data symlink of a mounted Secret
    except OSError as err:
        return (type(err).__name__,)
    return found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


class TlsFiles:
    """The serving certificate and key, and the client CA (None: no listener asks for a client
    certificate); the front contexts the listeners are started with; reload counts; each certificate."""

    def __init__(self, cert: str, key: str, client_ca: str | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.paths = tuple(p for p in (cert, key, client_ca) if p)
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self.clock = clock
        self.reloads = {"ok": 0, "failed": 0}
        self._stats = tuple(_stat(p) for p in self.paths)
        self._digest = self._digest_of(self._contents())
        self.certificates: list[Certificate] = []
        self._current = self._build(self._contents())   # {"server": ctx, "mutual": ctx or absent}
        self._fronts = {name: self._front(ctx) for name, ctx in self._current.items()}

    # --- what the listeners are given ---------------------------------------------------------------------
    def server_context(self) -> ssl.SSLContext:
        """The context of a listener that asks for no client certificate (the webhook's)."""
        return self._fronts["server"]

    def mutual_context(self) -> ssl.SSLContext:
        """The context of the verbs listener: a client certificate signed by the client CA is required."""
        return self._fronts["mutual"]

    def _front(self, context: ssl.SSLContext) -> ssl.SSLContext:
        name = "mutual" if context.verify_mode == ssl.CERT_REQUIRED else "server"

        def newest(connection, _server_name, used) -> None:
            latest = self._current[name]
            if used is not latest:
                connection.context = latest
        context.sni_callback = newest
        return context

    # --- loading --------------------------------------------------------------------------------------------
    def _contents(self) -> tuple[bytes, ...]:
        return tuple(_read(p) for p in self.paths)

    @staticmethod
    def _digest_of(contents: tuple[bytes, ...]) -> bytes:
        return hashlib.sha256(b"\0".join(contents)).digest()

    def _build(self, contents: tuple[bytes, ...]) -> dict[str, ssl.SSLContext]:
        """Fresh contexts from the files (raises ssl.SSLError / OSError / ValueError when they do not load)."""
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(self.cert, self.key)
        server.num_tickets = NUM_TICKETS
        built = {"server": server}
        certificates = certificates_in("serving", self.cert, contents[0])
        if self.client_ca:
            mutual = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            mutual.load_cert_chain(self.cert, self.key)
            mutual.load_verify_locations(cadata=contents[2].decode("ascii"))
            mutual.verify_mode = ssl.CERT_REQUIRED
            mutual.num_tickets = NUM_TICKETS
            built["mutual"] = mutual
            certificates += certificates_in("client-ca", self.client_ca, contents[2])
        self.certificates = certificates
        return built

    def check(self) -> bool:
        """Reload when a file changed since the last look; True when new contexts are in use."""
        stats = tuple(_stat(p) for p in self.paths)
        if stats == self._stats:
            return False
        self._stats = stats
        try:
            contents = self._contents()
            digest = self._digest_of(contents)
            if digest == self._digest:
                return False
            self._current = self._build(contents)     # self.certificates too, once everything loaded
        except (OSError, ValueError, ssl.SSLError) as err:
            self.reloads["failed"] += 1
            log.warning("TLS files changed but do not load; the listeners keep the previous certificate and "
                        "client CA until the files change again",
                        extra=fields(files=list(self.paths), error=str(getattr(err, "strerror", None) or err)))
            return False
        self._digest = digest
        self.reloads["ok"] += 1
        leaf = self.certificates[0]
        log.info("TLS files reloaded: new connections use them, open ones finish on the previous ones",
                 extra=fields(files=list(self.paths), serving_subject=leaf.subject,
                              serving_not_after=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(leaf.not_after)),
                              client_cas=[c.subject for c in self.certificates if c.role == "client-ca"]))
        return True

    async def watch_forever(self, interval: float = CHECK_INTERVAL) -> None:
        while True:
            await asyncio.sleep(interval)
            self.check()

    # --- what the service reports ---------------------------------------------------------------------------
    def problem(self, margin: float) -> str | None:
        """Why the service should not be ready: the serving certificate ends within `margin` seconds."""
        leaf = self.certificates[0]
        left = leaf.not_after - self.clock()
        if left > margin:
            return None
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(leaf.not_after))
        state = "expired" if left <= 0 else f"expires in {left:.0f} s"
        return (f"the serving certificate {self.cert} {state} (notAfter {when}), within --tls-expiry-margin "
                f"{margin:g} s; renew it: the service reloads it when the file changes")

    def describe(self):
        return []

    def collect(self):
        expiry = GaugeMetricFamily("tas_extender_certificate_expiry_timestamp_seconds",
                                   "notAfter of each certificate the listeners use (serving chain and client CAs), "
                                   "in seconds since the epoch", labels=["role", "file", "subject", "serial"])
        for cert in self.certificates:
            expiry.add_metric([cert.role, cert.file, cert.subject, cert.serial], cert.not_after)
        yield expiry
        reloads = CounterMetricFamily("tas_extender_certificate_reloads",
                                      "Changes of the TLS files, by whether they loaded", labels=["result"])
        for result, count in self.reloads.items():
            reloads.add_metric([result], count)
        yield reloads
