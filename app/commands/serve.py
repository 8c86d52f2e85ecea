"""`tas-extender serve`: the extender, webhook, debug API and page under uvicorn.

Every flag has a TAS_* environment variable (TAS_PORT, TAS_RESERVATION_TTL, ...); flags win.
"""
from __future__ import annotations

import argparse
import os
import sys

from pydantic import ValidationError

from topology.planner import policy_names

from ..settings import LOG_LEVELS, PREEMPTION_MODES, Settings, settings_problems

def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="run the scheduler extender service (standalone demo when no cluster is configured)",
        description="Run the extender (filter/prioritize/bind/preempt), the webhook, /debug and /ui. "
                    "Without --kubeconfig, --in-cluster or a cluster around it, it serves the built-in demo "
                    "cluster (or --cluster FILE) in memory. Every flag can be set as TAS_<FLAG> (e.g. TAS_PORT).")
    add = parser.add_argument
    add("--host", help="listen address (TAS_HOST, default 127.0.0.1 standalone, 0.0.0.0 with a cluster)")
    add("--port", type=int, help="listen port (TAS_PORT, default 8888)")
    add("--url-prefix", help="path prefix of the extender verbs (TAS_URL_PREFIX, default /scheduler)")
    add("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (TAS_TLS_CERT)")
    add("--tls-key", metavar="FILE", help="private key of --tls-cert (TAS_TLS_KEY)")
    add("--client-ca", metavar="FILE",
        help="serve the extender verbs on --verbs-port, over TLS that requires a client certificate signed by this "
             "CA (kube-scheduler's extender tlsConfig certFile/keyFile); required in a cluster (TAS_CLIENT_CA)")
    add("--verbs-port", type=int, help="port of the verbs with --client-ca (TAS_VERBS_PORT, default 8889)")
    add("--insecure-verbs", type=_bool, nargs="?", const=True, metavar="BOOL",
        help="in a cluster without --client-ca, serve the verbs on --port to any caller (warned at every start; "
             "TAS_INSECURE_VERBS)")
    add("--debug-port", type=int,
        help="in a cluster, /debug and /ui listen on 127.0.0.1 on this port only, for kubectl port-forward "
             "(TAS_DEBUG_PORT, default 8890)")
    add("--request-timeout", type=float, metavar="SECONDS",
        help="on every listener, close a connection whose request (head and body) has not arrived within this "
             "long (TAS_REQUEST_TIMEOUT, default 10)")
    add("--tls-expiry-margin", type=float, metavar="SECONDS",
        help="/readyz answers not ready once the serving certificate ends within this long; the TLS files are "
             "reloaded when they change (TAS_TLS_EXPIRY_MARGIN, default 3600)")
    add("--cluster", metavar="FILE", help="standalone: a kubectl get -o yaml dump instead of the demo (TAS_CLUSTER)")
    add("--demo-size", type=int, metavar="NODES",
        help="standalone: a generated demo fleet of this many nodes (a multiple of 1024, e.g. 16384) with running "
             "gangs and a refused one, instead of the 32-node demo (TAS_DEMO_SIZE)")
    add("--kubeconfig", metavar="FILE", help="watch and bind in the cluster of this kubeconfig (TAS_KUBECONFIG)")
    add("--in-cluster", type=_bool, nargs="?", const=True, metavar="BOOL",
        help="use the pod's service account (TAS_IN_CLUSTER; detected from KUBERNETES_SERVICE_HOST)")
    add("--reservation-ttl", type=float, metavar="SECONDS",
        help="drop a gang's reservations when its pods do not all arrive in time (TAS_RESERVATION_TTL, default 300)")
    add("--strategy", choices=policy_names(), help="placement strategy (TAS_STRATEGY, default binpack)")
    add("--log-level", choices=LOG_LEVELS, help="TAS_LOG_LEVEL, default info")
    add("--leader-elect", type=_bool, nargs="?", const=True, metavar="BOOL",
        help="only the holder of the Lease reports ready (TAS_LEADER_ELECT, default false)")
    add("--lease-name", help="Lease name for leader election (TAS_LEASE_NAME, default tas-extender)")
    add("--handover-timeout", type=float, metavar="SECONDS",
        help="a leader sent SIGTERM releases its Lease and keeps answering until another replica holds it, for at "
             "most this long (TAS_HANDOVER_TIMEOUT, default 15)")
    add("--handover-drain", type=float, metavar="SECONDS",
        help="then it answers this long more while the Service moves to that replica, and stops "
             "(TAS_HANDOVER_DRAIN, default 5)")
    add("--lease-namespace", help="Lease namespace (TAS_LEASE_NAMESPACE, default $POD_NAMESPACE or tas-system)")
    add("--scheduler-name", help="the scheduler profile(s) whose pods the extender binds, comma-separated; the webhook "
                                 "sets the first (TAS_SCHEDULER_NAME, default tas-scheduler)")
    add("--set-scheduler-name", type=_bool, nargs="?", const=True, metavar="BOOL",
        help="webhook: set spec.schedulerName on pods with topology annotations (TAS_SET_SCHEDULER_NAME)")
    add("--preemption", choices=PREEMPTION_MODES, help="gang preemption (TAS_PREEMPTION, default on)")
    add("--plain-pods", choices=("binpack", "spread", "neutral"),
        help="scores for GPU pods of no gang: binpack fills partly used nodes and racks first, keeping whole "
             "ones free for gangs; spread the reverse; neutral leaves it to kube-scheduler (TAS_PLAIN_PODS, "
             "default binpack)")
    add("--max-request-bytes", type=int, help="largest request body accepted (TAS_MAX_REQUEST_BYTES, default 128 MiB)")
    add("--webhook-owner-grace", type=float, metavar="SECONDS",
        help="webhook: deny (retry later) pods whose workload is not cached yet for this long, then allow "
             "them unchanged (TAS_WEBHOOK_OWNER_GRACE, default 30)")
    add("--member-wait", type=float, metavar="SECONDS",
        help="hold the filter call of a gang pod whose siblings are still being created while they keep "
             "coming, up to this long after the last one appeared (four times this per gang in all, a tenth of "
             "the time for all gangs), rather than refuse it into kube-scheduler's 1-2 s backoff; 0 refuses at "
             "once (TAS_MEMBER_WAIT, default 0.25, at most 1: four of them stay under kube-scheduler's "
             "httpTimeout of 5 s)")
    add("--native-gate", choices=("auto", "on", "off"),
        help="where the API server serves scheduling.k8s.io PodGroups, put every member of a gang into a native "
             "PodGroup (minCount = the gang's minimum) so that kube-scheduler itself waits for the members "
             "(TAS_NATIVE_GATE, default auto: when served; off: never)")
    add("--staleness-grace-period", type=float, metavar="SECONDS",
        help="evict the bound pods of a gang that has run below its minimum (some pods bound, too few) for "
             "this long, so that it is planned again whole, as KAI's stale gang eviction; negative never evicts; "
             "a PodGroup's spec.stalenessGracePeriod or the annotation kai.scheduler/staleness-grace-period "
             "overrides it (TAS_STALENESS_GRACE_PERIOD, default 60)")
    add("--gate-unfit-gangs", type=_bool, nargs="?", const=True, metavar="BOOL",
        help="webhook: put a scheduling gate (tas-extender.io/gang-fits) on the pods of a gang known not to fit "
             "at admission, so that kube-scheduler does not retry it on every cluster event; lifted as soon as "
             "it fits, and after --gate-unfit-bound seconds in any case (TAS_GATE_UNFIT_GANGS, default true)")
    add("--gate-unfit-bound", type=float, metavar="SECONDS",
        help="longest a pod stays behind that gate, fitting or not (TAS_GATE_UNFIT_BOUND, default 60)")
    add("--extra-kinds", metavar="LIST",
        help="custom workload kinds to watch and group besides the built-in ones, comma-separated "
             "<plural>.<group>/<version>=<Kind> (e.g. trainers.example.com/v1=Trainer); the ClusterRole must "
             "allow get/list/watch on them (TAS_EXTRA_KINDS)")
    _checked_by_settings(parser)
    parser.set_defaults(func=run)


def _checked_by_settings(parser: argparse.ArgumentParser) -> None:
    """Every flag of a setting reaches Settings as typed, so that a bad value gets the same one line as a bad
    TAS_* variable (settings_problems: the flag, the variable, the valid values), not argparse's usage dump;
    --help still lists the choices."""
    for action in parser._actions:
        if action.dest in Settings.model_fields:
            if action.choices and action.metavar is None:
                action.metavar = "{" + ",".join(action.choices) + "}"
            action.type = action.choices = None


def settings_from(args: argparse.Namespace) -> Settings:
    """Environment first, flags on top; a live cluster is detected when nothing else is configured."""
    overrides = {key: value for key, value in vars(args).items()
                 if key in Settings.model_fields and value is not None}
    settings = Settings(**overrides)
    if settings.mode == "standalone" and not settings.cluster and os.environ.get("KUBERNETES_SERVICE_HOST") \
            and "in_cluster" not in overrides and "TAS_IN_CLUSTER" not in os.environ:
        settings = settings.model_copy(update={"in_cluster": True})
    return settings


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from(args)
    except ValidationError as err:
        for problem in settings_problems(err):
            print(f"error: {problem}", file=sys.stderr)
        return 2
    problem = preflight(settings)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from ..cluster_file import ClusterFileError, load_objects
    try:                                # every input before the ports: a bad file is exit 2 whoever holds them
        objects = load_objects(settings.cluster) if settings.cluster else None
    except ClusterFileError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from .. import listeners
    for host, port, flags in listeners.addresses(settings):
        problem = listen_problem(host, port)
        if problem:
            print(f"error: {flags}: {problem}", file=sys.stderr)
            return 3                    # uvicorn's own code when it cannot bind (a race after this check)
    from ..logs import configure
    from ..server import create_app

    configure(settings.log_level)
    listeners.run(create_app(settings, objects=objects, serving=True), settings)
    return 0


def listen_problem(host: str, port: int) -> str | None:
    """Why the service could not listen there (a port in use, an address not on this machine), as one line
    before uvicorn would log it as JSON and exit 3."""
    import socket
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        return f"cannot resolve the address ({err.strerror})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)     # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as err:
            return (err.strerror or str(err)).lower()
    return None


def preflight(settings: Settings) -> str | None:
    """What would stop the service at start (TLS files, kubeconfig, in-cluster credentials), as one line
    naming the flag and the file, instead of a traceback from deep inside uvicorn or the client."""
    if settings.tls_cert:
        import ssl
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(settings.tls_cert, settings.tls_key)
        except (OSError, ssl.SSLError) as err:
            return (f"--tls-cert {settings.tls_cert} / --tls-key {settings.tls_key}: "
                    f"{getattr(err, 'strerror', None) or err}")
    if settings.kubeconfig or settings.in_cluster:
        from kubernetes import client as k8s
        from kubernetes import config as kube_config
        if settings.kubeconfig and not os.path.isfile(settings.kubeconfig):
            return f"--kubeconfig {settings.kubeconfig}: no such file"
        try:
            if settings.kubeconfig:
                kube_config.load_kube_config(config_file=settings.kubeconfig,
                                             client_configuration=k8s.Configuration())
            else:
                kube_config.load_incluster_config(client_configuration=k8s.Configuration())
        except Exception as err:         # noqa: BLE001 - ConfigException, YAML, OS and decoding errors alike
            reason = "; ".join(line.strip() for line in str(err).strip().splitlines()) or type(err).__name__
            if settings.kubeconfig:
                return f"--kubeconfig {settings.kubeconfig}: {reason}"
            return f"--in-cluster: {reason} (not running in a pod? give --kubeconfig FILE instead)"
    from ..listeners import preflight as listeners_preflight
    return listeners_preflight(settings)


def main(argv: list[str] | None = None) -> int:
    """`python -m app.commands.serve [flags]`: the serve command on its own."""
    parser = argparse.ArgumentParser(prog="tas-extender")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
