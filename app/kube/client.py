"""Connecting to the API server with the official client, and a raw JSON helper so objects stay plain dicts.

`build_api_client` loads the configuration (an explicit host, a kubeconfig file, in-cluster service account,
or the default kubeconfig) into a `kubernetes.client.ApiClient`; `KubeApi` sends requests through that
client (its auth, TLS and connection pool) but decodes bodies with orjson instead of the generated models.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

import orjson
import urllib3
from kubernetes import config as kube_config
from kubernetes.client import ApiClient, Configuration
from kubernetes.watch.watch import iter_resp_lines

from ..ports import WatchedKind
from . import one_write

USER_AGENT = "tas-extender"
POOL_SIZE = 32            # one long-lived connection per watched kind, plus concurrent binds


class KubeApiError(Exception):
    """A non-2xx answer (or a failed connection: status 0), with the fields of its metav1.Status."""

    def __init__(self, status: int, reason: str, message: str, body: Mapping | None = None):
        super().__init__(f"{status} {reason}: {message}" if status else message)
        self.status, self.reason, self.message, self.body = status, reason, message, body or {}

    @property
    def causes(self) -> list[Mapping]:
        return list((self.body.get("details") or {}).get("causes") or [])


def load_configuration(kubeconfig: str | None = None, context: str | None = None, host: str | None = None,
                       in_cluster: bool | None = None) -> Configuration:
    """`host` (e.g. `kubectl proxy` or a test server) > `kubeconfig` > in-cluster > default kubeconfig.
    `in_cluster=None` detects a pod from KUBERNETES_SERVICE_HOST."""
    configuration = Configuration()
    if in_cluster is None:
        in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if host:
        configuration.host = host
    elif kubeconfig:
        kube_config.load_kube_config(config_file=os.path.expanduser(kubeconfig), context=context,
                                     client_configuration=configuration)
    elif in_cluster:
        kube_config.load_incluster_config(client_configuration=configuration)
    else:
        kube_config.load_kube_config(context=context, client_configuration=configuration)
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, POOL_SIZE)
    return configuration


def build_api_client(kubeconfig: str | None = None, context: str | None = None, host: str | None = None,
                     in_cluster: bool | None = None) -> ApiClient:
    client = ApiClient(load_configuration(kubeconfig, context, host, in_cluster))
    client.user_agent = USER_AGENT
    return client


def resource_path(kind: WatchedKind, namespace: str | None = None, name: str | None = None,
                  subresource: str | None = None) -> str:
    """REST path of a collection (every namespace when `namespace` is None), an object or a subresource."""
    base = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    if namespace is not None and kind.namespaced:
        base += f"/namespaces/{namespace}"
    path = f"{base}/{kind.plural}"
    if name is not None:
        path += f"/{name}"
        if subresource:
            path += f"/{subresource}"
    return path


def _error_from(status: int, reason: str, data: bytes) -> KubeApiError:
    try:
        body = orjson.loads(data) if data else {}
    except orjson.JSONDecodeError:
        body = {}
    if not isinstance(body, dict) or body.get("kind") != "Status":
        text = data.decode("utf-8", "replace").strip()[:200]
        return KubeApiError(status, reason or "", text or reason or "no body")
    return KubeApiError(status, body.get("reason") or reason or "", body.get("message") or "", body)


class KubeApi:
    """Raw JSON requests and watch streams through an official `ApiClient`. Thread-safe."""

    def __init__(self, api_client: ApiClient, timeout: float = 30.0):
        self.api_client = api_client
        pool_manager = getattr(getattr(api_client, "rest_client", None), "pool_manager", None)
        if pool_manager is not None:
            one_write.install(pool_manager)      # a request's head and body in one write (one_write.py)
        self.timeout = timeout
        self._streams_lock = threading.Lock()
        self._streams: set[urllib3.BaseHTTPResponse] = set()

    def _send(self, method: str, path: str, query: Sequence[tuple[str, Any]] | None, body: Any,
              content_type: str | None, timeout: Any) -> urllib3.BaseHTTPResponse:
        """Straight to the client's urllib3 pool (its TLS and proxy settings), with the client's current
        bearer token: the generated client's serialization walks and copies every body, which cost more
        CPU than the rest of a bind."""
        configuration = self.api_client.configuration
        headers = {"Accept": "application/json", "User-Agent": self.api_client.user_agent}
        token = configuration.auth_settings().get("BearerToken") or {}
        if token.get("value"):
            headers[token["key"]] = token["value"]
        url = configuration.host + path + (f"?{urlencode(list(query))}" if query else "")
        data = None
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
            data = orjson.dumps(body)
        if isinstance(timeout, tuple):
            timeout = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        else:
            timeout = urllib3.Timeout(total=timeout)
        try:
            return self.api_client.rest_client.pool_manager.request(
                method, url, body=data, headers=headers, timeout=timeout, preload_content=False)
        except urllib3.exceptions.HTTPError as error:
            raise KubeApiError(0, "ConnectionError", f"{method} {path}: {error}") from error

    def request(self, method: str, path: str, *, query: Sequence[tuple[str, Any]] | None = None,
                body: Any = None, content_type: str | None = None) -> dict:
        """One call; the decoded JSON answer, or KubeApiError for a non-2xx status or a transport failure."""
        response = self._send(method, path, query, body, content_type, self.timeout)
        try:
            data = response.data
        except urllib3.exceptions.HTTPError as error:
            raise KubeApiError(0, "ConnectionError", f"{method} {path}: {error}") from error
        finally:
            response.release_conn()
        if not 200 <= response.status < 300:
            raise _error_from(response.status, response.reason or "", data)
        try:
            return orjson.loads(data) if data else {}
        except orjson.JSONDecodeError as error:     # a proxy's page, a cut-off answer: a failed call
            raise KubeApiError(0, "InvalidResponse", f"{method} {path}: the answer is not JSON ({error})") from error

    def stream(self, path: str, query: Sequence[tuple[str, Any]], read_timeout: float) -> Iterator[dict]:
        """Decoded lines of a streaming GET (a watch). `close_streams()` ends it from another thread."""
        response = self._send("GET", path, query, None, None, (10.0, read_timeout))
        if not 200 <= response.status < 300:
            data = response.data
            response.release_conn()
            raise _error_from(response.status, response.reason or "", data)
        with self._streams_lock:
            self._streams.add(response)
        try:
            for line in iter_resp_lines(response):
                if line:
                    yield orjson.loads(line)
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise KubeApiError(0, "ConnectionError", f"watch {path}: {error}") from error
        finally:
            with self._streams_lock:
                self._streams.discard(response)
            response.close()

    def close_streams(self) -> None:
        with self._streams_lock:
            streams = list(self._streams)
        for response in streams:
            try:
                response.shutdown()
            except (OSError, ValueError, AttributeError):    # already finished, or no socket to shut down
                response.close()

    def close(self) -> None:
        self.close_streams()
        self.api_client.close()
