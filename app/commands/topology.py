"""`tas-extender topology`: print each topology tree with free and total capacity per domain."""
from __future__ import annotations

import argparse
import sys

import numpy as np

from topology.cluster import Cluster, pod_key
from topology.fragmentation import ShapeError, TreeMeasure
from topology.preemption import RunningGang, RunningPod
from topology.counts import sum_by_level
from topology.quantity import format_units
from topology.tree import HOSTNAME_LABEL, TopologyTree

from ..cluster_file import ClusterFileError, load_cluster, load_objects
from ..fragmentation import measure_cluster, shapes_for
from ..preemption import victim_group


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
    parser.add_argument("--shape", action="append", metavar="RESOURCE=QUANTITY[,...]",
                        help="pod shape for the largest gang that fits, e.g. nvidia.com/gpu=8 (repeatable; "
                             "default: one unit and a whole node)")
    parser.add_argument("--below-priority", type=int, metavar="N",
                        help="also the largest gang if every evictable pod of a priority below N were gone")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        objects = load_objects(args.cluster)
        cluster = load_cluster(args.cluster)
    except ClusterFileError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        shapes = shapes_for(cluster, args.shape)
    except ShapeError as err:
        print(f"error: --shape: {err}", file=sys.stderr)
        return 2
    resource = args.resource or ("nvidia.com/gpu" if "nvidia.com/gpu" in cluster.resources.column else "cpu")
    if resource not in cluster.resources.column:
        print(f"error: --resource {resource!r} is offered by no node; valid: "
              f"{', '.join(cluster.resources.names)}", file=sys.stderr)
        return 2
    running = running_pods(objects, cluster) if args.below_priority is not None else None
    measures = measure_cluster(cluster, shapes, running, args.below_priority)
    print(render(cluster, resource, measures))
    return 0


def render(cluster: Cluster, resource: str, measures: dict[str, TreeMeasure] | None = None) -> str:
    measures = measure_cluster(cluster, shapes_for(cluster)) if measures is None else measures
    lines = []
    for name, tree in sorted(cluster.topologies.items()):
        lines += _render_tree(cluster, tree, resource, measures[name])
        lines += _render_fragmentation(measures[name])
        lines.append("")
    for name, error in sorted(cluster.topology_errors.items()):
        lines.append(f"topology {name}: INVALID: {error}")
    if not cluster.topologies and not cluster.topology_errors:
        lines.append("no Topology objects found")
    return "\n".join(lines).rstrip()


def _render_tree(cluster: Cluster, tree: TopologyTree, resource: str, fragments: TreeMeasure) -> list[str]:
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
        lines.append(f"{'  ' * indent}{value:<{40 - 2 * indent}} {figure:>15}"
                     f"{_whole_free(tree, fragments, level, domain)}")
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


def _whole_free(tree: TopologyTree, fragments: TreeMeasure, level: int, domain: int) -> str:
    """`   whole free: 1/2 racks, 9/16 nodes` (units of the unit resource; nothing below the racks)."""
    if not fragments.levels or level + 1 >= tree.depth:
        return ""
    here = fragments.levels[level]
    child = "nodes" if tree.levels[level + 1].key == HOSTNAME_LABEL else tree.levels[level + 1].display
    parts = [f"{int(here.free_children[domain])}/{len(tree.children_of(level, domain))} {child}"]
    if level + 2 < tree.depth:
        parts.append(f"{int(here.free_nodes[domain])}/{int(here.unit_nodes[domain])} nodes")
    return "   whole free: " + ", ".join(parts)


def _render_fragmentation(fragments: TreeMeasure) -> list[str]:
    """Whole free domains per level, and the largest gang of each shape that fits at each level."""
    if not fragments.levels:
        return []
    lines = ["  whole free (every " + fragments.resource + " free, node usable): " +
             ", ".join(f"{level.level} {level.whole_free}/{level.domains}" for level in fragments.levels)]
    if not fragments.largest:
        return lines
    levels = list(dict.fromkeys(item.level for item in fragments.largest))
    gone = f" (priority < {fragments.below_priority} gone)" if fragments.below_priority is not None else ""
    width = max(36, max(len(item.shape) for item in fragments.largest) + len(gone) + 4)
    cell = max(10, max(len(lv) for lv in levels) + 2)
    lines.append(f"  {'largest gang that fits now, pods of':<{width}}" + "".join(f"{lv:>{cell}}" for lv in levels))
    rows: dict[str, dict[str, object]] = {}
    for item in fragments.largest:
        rows.setdefault(item.shape, {})[item.level] = item
    for shape, by_level in rows.items():
        lines.append(f"    {shape:<{width - 2}}" + "".join(f"{by_level[lv].pods:>{cell}}" for lv in levels))
        if fragments.below_priority is not None:
            label = shape + gone
            lines.append(f"    {label:<{width - 2}}" + "".join(f"{by_level[lv].pods_reclaimed:>{cell}}" for lv in levels))
    return lines


def running_pods(objects, cluster: Cluster) -> list[RunningGang]:
    """The evictable bound pods of a cluster file, each alone, with its priority (DaemonSet and static
    pods are never evicted)."""
    gangs = []
    for pod in objects.pods:
        key = pod_key(pod)
        usage = cluster.pods.get(key)
        if usage is None or victim_group(pod, key) is None:
            continue
        priority = (pod.get("spec") or {}).get("priority")
        gangs.append(RunningGang(key, priority if isinstance(priority, int) else 0,
                                 {key: RunningPod(usage.node, usage.request)}))
    return gangs
