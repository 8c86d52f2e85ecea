"""`tas-extender simulate`: replay a trace of workloads against a cluster dump with a placement policy."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from ..cluster_file import ClusterFileError, load_cluster
from ..offline.output import ProgressBar, comparison_table
from ..offline.policies import POLICIES, PolicyError, get_policy
from ..offline.simulate import Simulation
from ..offline.trace import TraceError, read_trace
from ..offline.workloads import WorkloadError

BAD_INPUT = 2


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "simulate", help="replay a JSON Lines trace of workloads and report placement quality",
        description="Replay a trace ({\"at\", \"duration\", \"workload\"} per line) against a cluster dump. "
                    "Writes one result line per workload and prints a summary (stderr, or stdout with "
                    "--summary).")
    parser.add_argument("--cluster", metavar="FILE", required=True,
                        help="YAML/JSON dump of Nodes, Topology objects and bound Pods")
    parser.add_argument("--trace", metavar="FILE", required=True, help="JSON Lines trace of workloads")
    parser.add_argument("--out", metavar="RESULT.jsonl", required=True, help="where to write the results")
    parser.add_argument("--policy", default="tas", metavar="NAME",
                        help=f"placement policy: {', '.join(POLICIES)} (default tas, our planner)")
    parser.add_argument("--summary", action="store_true", help="print the summary on stdout (default stderr)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        policy = get_policy(args.policy)
        cluster = load_cluster(args.cluster)
        entries = read_trace(args.trace)
        progress = ProgressBar(sys.stderr)
        simulation = Simulation(cluster, policy, entries, progress=progress)
    except (PolicyError, ClusterFileError, TraceError, WorkloadError) as err:
        print(f"error: {err}", file=sys.stderr)
        return BAD_INPUT
    result = simulation.run()
    progress.close()
    try:
        with Path(args.out).open("wb") as out:
            for line in result.results():
                out.write(orjson.dumps(line) + b"\n")
    except OSError as err:
        print(f"error: cannot write {args.out}: {err.strerror}", file=sys.stderr)
        return BAD_INPUT
    print(comparison_table([result.summary()]), file=sys.stdout if args.summary else sys.stderr)
    return 0
