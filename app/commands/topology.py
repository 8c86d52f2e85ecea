"""`tas-extender topology`: print each topology tree with free and total capacity per domain."""
from __future__ import annotations

import argparse
import sys

import numpy as np

from topology.cluster import Cluster
from topology.counts import sum_by_level
from topology.quantity import format_units
from topology.tree import TopologyTree

from ..cluster_file import ClusterFileError, load_cluster


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "topology", help="print the topology trees with free capacity",
        description="Print each topology as a tree with free/total capacity per domain, from the built-in "
                    "demo cluster or a cluster dump. Exit code 0, or 2 for a file that cannot be read.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--demo", action="store_true", help="the built-in demo cluster (the default)")
    source.add_argument("--cluster", metavar="FILE", help="a YAML/JSON dump of Nodes, Pods and Topologies")
    parser.add_argument("--resource", default=None,
                        help="resource to show (default: nvidia.com/gpu when nodes have it, else cpu)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        cluster = load_cluster(args.cluster)
    except ClusterFileError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    resource = args.resource or ("nvidia.com/gpu" if "nvidia.com/gpu" in cluster.resources.column else "cpu")
    if resource not in cluster.resources.column:
        print(f"error: --resource {resource!r} is offered by no node; valid: "
              f"{', '.join(cluster.resources.names)}", file=sys.stderr)
        return 2
    print(render(cluster, resource))
    return 0


def render(cluster: Cluster, resource: str) -> str:
    lines = []
    for name, tree in sorted(cluster.topologies.items()):
        lines += _render_tree(cluster, tree, resource)
        lines.append("")
    for name, error in sorted(cluster.topology_errors.items()):
        lines.append(f"topology {name}: INVALID: {error}")
    if not cluster.topologies and not cluster.topology_errors:
        lines.append("no Topology objects found")
    return "\n".join(lines).rstrip()


def _render_tree(cluster: Cluster, tree: TopologyTree, resource: str) -> list[str]:
    column = cluster.resources.column[resource]
    usable, unusable = cluster.usable_free()
    free = sum_by_level(tree, usable[:, column])
    stranded = sum_by_level(tree, unusable[:, column])
    total = sum_by_level(tree, cluster.capacity.allocatable[:, column])
    levels = " > ".join(level.display for level in tree.levels)
    lines = [f"topology {tree.name} ({tree.source}): {levels}   [{resource} usable free/total; "
             f"(+N) free on NotReady, cordoned or tainted nodes]"]
    if tree.excluded:
        lines.append(f"  {len(tree.excluded)} node(s) left out: " +
                     ", ".join(f"{n} ({why})" for n, why in sorted(tree.excluded.items())))

    def walk(level: int, domain: int, indent: int) -> None:
        value = tree.domain_value(level, domain)
        figure = f"{format_units(resource, int(free[level][domain]))}/{format_units(resource, int(total[level][domain]))}"
        if stranded[level][domain]:
            figure += f" (+{format_units(resource, int(stranded[level][domain]))})"
        if level == tree.depth - 1:
            notes = _node_notes(cluster, tree.nodes_in(level, domain))
            lines.append(f"{'  ' * indent}{value:<{40 - 2 * indent}} {figure:>15}{notes}")
            return
        lines.append(f"{'  ' * indent}{value:<{40 - 2 * indent}} {figure:>15}")
        for child in tree.children_of(level, domain):
            walk(level + 1, int(child), indent + 1)

    for root in range(tree.domain_count(0)):
        walk(0, root, 1)
    return lines


def _node_notes(cluster: Cluster, nodes: np.ndarray) -> str:
    notes = []
    for i in nodes:
        node = cluster.nodes[int(i)]
        if not node.ready:
            notes.append(f"{node.name} NotReady")
        elif node.unschedulable:
            notes.append(f"{node.name} cordoned")
        elif node.taints:
            notes.append(f"{node.name} tainted {node.taints[0].get('key')}")
    return ("   " + "; ".join(notes)) if notes else ""
