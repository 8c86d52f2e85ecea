"""Bind: the placement annotations, then the Binding through the ClusterWriter.

A retry for the same pod and node succeeds; a gang pod may bind only to its slot's planned node. The
state lock covers the in-memory checks and the final accounting; the API calls run outside it, one at
a time per pod (retries of one pod race each other, different pods do not wait for each other).
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping

from topology.cluster import pod_key

from ..logs import fields, get_logger
from ..placement import TOPOLOGY_ANNOTATION, placement_annotation
from ..ports import BindConflict, ClusterWriter
from ..state import GANG_ANNOTATION, SLOT_ANNOTATION, ServiceState
from . import planning, trusted

log = get_logger(__name__)


class Binder:
    def __init__(self, state: ServiceState, writer: ClusterWriter | None):
        self.state = state
        self.writer = writer
        self._pod_locks: weakref.WeakValueDictionary[str, threading.Lock] = weakref.WeakValueDictionary()
        self._guard = threading.Lock()

    def _pod_lock(self, key: str) -> threading.Lock:
        with self._guard:
            lock = self._pod_locks.get(key)
            if lock is None:
                lock = self._pod_locks[key] = threading.Lock()
            return lock

    def bind(self, namespace: str, name: str, uid: str, node: str) -> tuple[str, str | None]:
        """('' on success, else the error for the scheduler (which retries the pod); the pod's gang)."""
        state = self.state
        key = f"{namespace}/{name}"
        with self._pod_lock(key):
            with state.lock:
                refusal = trusted.bind_refusal(state, namespace, name, uid)
                if refusal:
                    state.metrics.binds.labels("refused").inc()
                    log.warning("bind refused", extra=fields(pod=key, node=node, reason=refusal))
                    return refusal, None
                pod = state.find_pod(namespace, name)
                current = ((pod or {}).get("spec") or {}).get("nodeName")
                if current:
                    state.metrics.binds.labels("repeat" if current == node else "conflict").inc()
                    return ("" if current == node else f"pod {key} is already bound to {current}"), None
                annotations, refusal = self.placement(pod, node) if pod is not None else ({}, "")
                if refusal:
                    state.metrics.binds.labels("refused").inc()
                    log.info("bind refused", extra=fields(pod=key, node=node, reason=refusal))
                    return refusal, None
            gang = annotations.get(GANG_ANNOTATION)
            error = self._write(namespace, name, uid, node, annotations)
            if error:
                return error, gang
            if pod is not None:
                metadata = pod.get("metadata") or {}
                state.record_binding({**pod, "metadata": {**metadata, "annotations": {
                    **(metadata.get("annotations") or {}), **annotations}}}, node)
            state.metrics.binds.labels("bound").inc()
            log.info("bound", extra=fields(pod=key, gang=gang, node=node))
            return "", gang

    def _write(self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]) -> str:
        state, key = self.state, f"{namespace}/{name}"
        if self.writer is None:
            return "no cluster writer configured"
        try:
            # one write: the API server copies a Binding's annotations onto the pod as it binds it
            self.writer.bind(namespace, name, uid, node, annotations)
        except BindConflict as err:
            if err.node != node:                 # bound elsewhere meanwhile; same node = a retry
                state.metrics.binds.labels("conflict").inc()
                return f"pod {key}: {err}"
        except Exception as err:                 # the API call failed: the scheduler retries the pod
            state.metrics.binds.labels("error").inc()
            log.warning("bind failed", extra=fields(pod=key, node=node, error=str(err)))
            return f"bind of pod {key} to {node} failed: {err}"
        return ""

    def placement(self, pod: Mapping, node: str) -> tuple[dict[str, str], str]:
        """(the placement annotations for a gang pod bound to `node`, a refusal). Plain pods get none.
        A gang pod may only bind to its slot's planned node: another node would break the plan (the
        scheduler retries the pod, and filter sends it to its node)."""
        state = self.state
        try:
            ident = planning.identify(state, pod)
        except planning.GroupingError:
            return {}, ""
        if ident is None:
            return {}, ""
        plan = state.plans.get(ident.gang)
        slot_state = plan.slot_for(pod_key(pod), ident.slot) if plan is not None else None
        if slot_state is not None and slot_state.node is not None and slot_state.node != node:
            return {}, (f"gang {ident.gang}: pod {pod_key(pod)} ({slot_state.slot}) is planned on "
                        f"{slot_state.node}, not {node}; binding it elsewhere would break the gang's plan")
        slot = slot_state.slot if slot_state is not None else ident.slot
        annotations = {GANG_ANNOTATION: ident.gang, SLOT_ANNOTATION: str(slot)}
        tree = state.cluster.topologies.get(ident.topology or "")
        index = state.cluster.node_index.get(node)
        if tree is not None and index is not None and tree.member[index]:
            annotations[TOPOLOGY_ANNOTATION] = tree.name
            for level, value in zip(tree.levels, tree.node_path(index)):
                annotations[placement_annotation(level)] = value
        return annotations, ""
