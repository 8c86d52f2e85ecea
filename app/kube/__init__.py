"""The Kubernetes-facing adapters: API client, list/watch sync, cluster writer, leader election.

    api = KubeApi(build_api_client(kubeconfig="~/.kube/config"))     # or in_cluster=True
    source = KubeSource(api, sink, settings.watched_kinds)   # list + watch these kinds into an ObjectSink
    writer = KubeWriter(api)                 # ClusterWriter: Binding, annotations, Eviction, Events
    elector = LeaderElector(api, "tas-system", "tas-extender")      # is_leader() for /readyz
    connection = adapters(settings)          # the service's writer and elector; .parts(sink) adds its source
"""
from __future__ import annotations

import os

from .client import KubeApi, KubeApiError, build_api_client, load_configuration, resource_path
from .leader import LeaderElector, default_identity
from .parts import KubeConnection, KubeParts
from .sync import KubeSource
from .writer import KubeWriter

__all__ = ["KubeApi", "KubeApiError", "KubeConnection", "KubeParts", "KubeSource", "KubeWriter", "LeaderElector",
           "adapters", "build_api_client", "default_identity", "load_configuration", "resource_path"]


def adapters(settings, *, host: str | None = None) -> KubeConnection:
    """The service's Kubernetes connection from its Settings: writer, elector, and `parts(sink)` for the
    list/watch source feeding `sink`. `host` points at an API server directly (tests, `kubectl proxy`)
    instead of a kubeconfig."""
    client = build_api_client(kubeconfig=None if settings.in_cluster else settings.kubeconfig, host=host,
                              in_cluster=settings.in_cluster or None)
    api = KubeApi(client)
    identity = os.environ.get("POD_NAME") or default_identity()
    elector = (LeaderElector(api, settings.lease_namespace, settings.lease_name, identity)
               if settings.leader_elect else None)
    kinds = settings.watched_kinds                          # WATCHED_KINDS and --extra-kinds
    return KubeConnection(KubeWriter(api, instance=identity), elector,
                          lambda sink: KubeSource(api, sink, kinds))
