"""`tas-extender plan`: would these workloads fit on this cluster, and where?"""
from __future__ import annotations

import argparse
import sys

from topology.planner import policy_names

from ..cluster_file import ClusterFileError, cluster_of, load_objects
from ..offline.output import plan_json, render_table
from ..offline.plan_cmd import BAD_INPUT, advise_refused, exit_code, plan_gangs
from ..offline.workloads import WorkloadError, load_workload_files

FORMATS = ("table", "json")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plan", help="plan workloads against a cluster dump: where would each pod go?",
        description="Plan workloads against a cluster dump with the service's grouper and planner. "
                    "Exit code 0: every gang placed; 1: a gang does not fit; 2: bad input.")
    parser.add_argument("--cluster", metavar="FILE", required=True,
                        help="YAML/JSON dump of Nodes, Topology objects and bound Pods")
    parser.add_argument("--workload", metavar="FILE", required=True, nargs="+", action="extend",
                        help="workload manifests (Job, kubeflow jobs, LeaderWorkerSet, PodGroup with Pods)")
    parser.add_argument("-o", "--output", choices=FORMATS, default="table", help="table (default) or json")
    parser.add_argument("--strategy", choices=policy_names(), default="binpack",
                        help="placement strategy unless a workload sets its own (default binpack)")
    parser.add_argument("--whatif", action="store_true",
                        help="for a gang not placed: what would have to be evicted (the preemption search, at the "
                             "gang's priority and at any), where, and the placement that would follow")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        objects = load_objects(args.cluster)
        cluster = cluster_of(objects, args.cluster)
        gangs = load_workload_files(args.workload, cluster.topologies)
        outcomes = plan_gangs(cluster, gangs, args.strategy, pods=objects.pods)
        if args.whatif:
            advise_refused(cluster, objects, outcomes, args.strategy)
    except (ClusterFileError, WorkloadError) as err:
        print(f"error: {err}", file=sys.stderr)
        return BAD_INPUT
    print(plan_json(cluster, outcomes) if args.output == "json" else render_table(cluster, outcomes))
    return exit_code(outcomes)
