"""How the offline tools print: plan tables and JSON, the simulation summary, a progress bar."""
from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

import orjson

from topology.cluster import Cluster
from topology.groups import GroupTree, Slot
from topology.plan import Plan
from topology.tree import HOSTNAME_LABEL, TopologyTree

from .metrics import Summary


@dataclass
class GangOutcome:
    """One planned gang of a workload file."""

    source: str                    # the file the workload came from
    workload: str                  # "PyTorchJob research/llm"
    tree: GroupTree
    plan: Plan
    topology: TopologyTree | None  # the topology the domains are shown for
    advice: dict | None = None     # `plan --whatif`: what would make a refused gang fit


# --- plan: table -------------------------------------------------------------------------------------

def _shown_levels(topology: TopologyTree | None) -> list[int]:
    if topology is None:
        return []
    return [i for i, level in enumerate(topology.levels) if level.key != HOSTNAME_LABEL]


def _leaf_names(tree: GroupTree) -> dict[Slot, tuple[str, str]]:
    """Each slot's leaf group (rows are grouped by it) and its segment name ("-" when unsegmented)."""
    return {slot: (group.name, group.name if group.segment is not None else "-")
            for group in tree.groups() if group.is_leaf for slot in group.slots}


def _pod_rows(cluster: Cluster, outcome: GangOutcome) -> list[dict]:
    topology, leaf = outcome.topology, _leaf_names(outcome.tree)
    rows = []
    for slot, node in sorted(outcome.plan.slots.items(), key=lambda item: (leaf.get(item[0], ("", "")), item[0])):
        path = topology.node_path(node) if topology is not None else None
        domains = {topology.levels[i].display: (path[i] if path else None) for i in _shown_levels(topology)}
        rows.append({"role": slot.role, "index": slot.index, "segment": leaf.get(slot, ("", "-"))[1],
                     "group": leaf.get(slot, ("", "-"))[0],
                     "node": cluster.node_names[node], "domains": domains})
    return rows


def render_table(cluster: Cluster, outcomes: Sequence[GangOutcome]) -> str:
    blocks = [_gang_table(cluster, outcome) for outcome in outcomes]
    return "\n\n".join(blocks) if blocks else "no workloads found"


def _gang_table(cluster: Cluster, outcome: GangOutcome) -> str:
    tree, plan = outcome.tree, outcome.plan
    status = "PLACED" if plan.placed else "NOT PLACED"
    lines = [f"{outcome.workload} (gang {tree.key}, from {outcome.source}): {status}"]
    if tree.topology:
        lines.append(f"  topology {tree.topology}")
    for warning in tree.warnings:
        lines.append(f"  warning: {warning}")
    if not plan.placed:
        lines += [f"  {line}" for line in (plan.reason or "does not fit").splitlines()]
        lines += _advice_lines(outcome.advice)
        return "\n".join(lines)
    for name, placement in plan.groups.items():
        if placement.level:
            spans = ", ".join(f"{n} {level}{'' if n == 1 else 's'}" for level, n in placement.spans.items())
            lines.append(f"  group {name}: {placement.level} {placement.domain}" + (f" (spans {spans})" if spans else ""))
    levels = [outcome.topology.levels[i].display for i in _shown_levels(outcome.topology)]
    header = ["SEGMENT", "ROLE", "INDEX", "NODE"] + [level.upper() for level in levels]
    rows = _pod_rows(cluster, outcome)
    table: list[list[str]] = []
    previous = None
    for row in rows:
        if previous is not None and row["group"] != previous:
            table.append([])
        previous = row["group"]
        table.append([row["segment"], row["role"], str(row["index"]), row["node"]] +
                     [row["domains"][level] or "-" for level in levels])
    lines += _columns(header, table, indent="  ")
    if plan.unplaced:
        left = ", ".join(str(slot) for slot in sorted(plan.unplaced))
        lines.append(f"  elastic pods not placed: {left}" + (f" ({plan.reason})" if plan.reason else ""))
    return "\n".join(lines)


def _columns(header: list[str], rows: list[list[str]], indent: str = "") -> list[str]:
    widths = [max([len(header[i])] + [len(r[i]) for r in rows if r]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return indent + "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()

    return [line(header)] + [line(r) if r else "" for r in rows]


def _advice_lines(advice: dict | None, shown: int = 12) -> list[str]:
    """`what if: ...`, then the victims one per line and the placement that would follow."""
    if advice is None:
        return []
    lines = [f"  what if: {advice['verdict']}: {advice['text']}"]
    victims = advice.get("victims") or []
    for victim in victims[:shown]:
        lines.append(f"    evict {victim['pod']} on {victim['node']} (gang {victim['gang']}, priority {victim['priority']})")
    if len(victims) > shown:
        lines.append(f"    ... and {len(victims) - shown} more")
    if advice.get("placement") and victims:
        nodes = sorted(set(advice["placement"].values()))
        lines.append(f"    then the gang lands in {advice.get('domain')} on {len(nodes)} node(s): {', '.join(nodes[:shown])}"
                     + (" ..." if len(nodes) > shown else ""))
    return lines


# --- plan: JSON ---------------------------------------------------------------------------------------

def plan_json(cluster: Cluster, outcomes: Sequence[GangOutcome]) -> str:
    gangs = []
    for outcome in outcomes:
        plan = outcome.plan
        gangs.append({
            "workload": outcome.workload, "source": outcome.source, "gang": outcome.tree.key,
            "topology": outcome.tree.topology, "placed": plan.placed, "reason": plan.reason,
            "pods": _pod_rows(cluster, outcome) if plan.placed else [],
            "unplaced": [{"role": s.role, "index": s.index} for s in sorted(plan.unplaced)],
            "groups": {name: {"level": g.level, "domain": g.domain, "spans": g.spans}
                       for name, g in plan.groups.items()},
            "warnings": list(outcome.tree.warnings),
            **({"whatif": outcome.advice} if outcome.advice is not None else {}),
        })
    document = {"placed": all(g["placed"] for g in gangs) and bool(gangs), "gangs": gangs}
    return orjson.dumps(document, option=orjson.OPT_INDENT_2).decode()


# --- simulate: summary ----------------------------------------------------------------------------------

def _seconds(value: float) -> str:
    if value >= 3600:
        return f"{value / 3600:.1f} h"
    if value >= 60:
        return f"{value / 60:.1f} min"
    return f"{value:.0f} s"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def summary_rows(summary: Summary) -> list[tuple[str, str]]:
    rows = [
        ("workloads placed", f"{summary.placed} / {summary.workloads}"),
        ("never placed", str(summary.never_placed)),
        ("mean wait", _seconds(summary.mean_wait)),
        ("p90 wait", _seconds(summary.p90_wait)),
        ("GPU utilization", _share(summary.gpu_utilization)),
        ("GPU utilization while jobs wait", _share(summary.contended_utilization)),
        ("makespan", _seconds(summary.makespan)),
    ]
    for level, value in zip(summary.levels, summary.job_spans):
        rows.append((f"{level}s per job (multi-pod)", "-" if value is None else f"{value:.2f}"))
    for level, value in zip(summary.levels, summary.segment_spans):
        rows.append((f"{level}s per segment", "-" if value is None else f"{value:.2f}"))
    rows += [
        ("preferred constraints met", _share(summary.preferred_met)),
        ("required constraints met", _share(summary.required_met)),
        ("planning time per workload", f"{summary.plan_ms_mean:.1f} ms mean, {summary.plan_ms_p90:.1f} ms p90"),
    ]
    return rows


def comparison_table(summaries: Sequence[Summary], markdown: bool = False) -> str:
    """Figures as rows, one column per policy."""
    columns = [summary_rows(s) for s in summaries]
    names = [label for label, _ in columns[0]] if columns else []
    header = ["figure"] + [s.policy for s in summaries]
    rows = [[name] + [dict(column).get(name, "-") for column in columns] for name in names]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    return "\n".join(_columns(header, rows))


# --- progress -----------------------------------------------------------------------------------------

class ProgressBar:
    """`simulate [#####-----] 120/300 workloads, t=3.2 h` redrawn in place; silent unless a terminal."""

    def __init__(self, stream: TextIO | None = None, width: int = 30):
        self.stream = stream or sys.stderr
        self.width = width
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.shown = False

    def __call__(self, done: int, total: int, now: float) -> None:
        if not self.enabled or total <= 0:
            return
        filled = self.width * done // total
        self.stream.write(f"\rsimulate [{'#' * filled}{'-' * (self.width - filled)}] "
                          f"{done}/{total} workloads, t={_seconds(now)} ")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
