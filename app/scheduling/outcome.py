"""A filter verb's answer (FilterOutcome) and the two message helpers every part of the engine shares:
a refusal of every candidate, and the `gang <key> (<summary>): ...` prefix."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..state.plans import GangPlan


@dataclass
class FilterOutcome:
    nodes: list[str]                                   # nodes that pass, in the order received
    failed: dict[str, str] = field(default_factory=dict)
    error: str = ""
    ends_at: float | None = None                       # a refusal that runs out by itself: when
    final: bool = False                                # a refusal only a new pod can end (a bad spec)
    # a refusal no eviction can end (the gang's pods do not all exist yet, a bad spec): kube-scheduler gets
    # it as FailedAndUnresolvableNodes and skips its preemption dry run, which is serial in its cycle and
    # on a cluster with lower-priority pods would find victims on every node and call our preempt verb
    unresolvable: bool = False
    awaiting: tuple[str, int] | None = None            # (gang, pods missing) when refused "waiting for N more pods"
    everywhere: int = 0                                # unresolvable: `failed`'s one node stands for this many
    routine: bool = False                              # an expected refusal (a keyed gang's other domain): logged at debug


def refuse_all(candidates: Sequence[str], message: str, unresolvable: bool = False) -> FilterOutcome:
    """Every candidate fails with `message`. Unresolvable, one candidate stands for all of them (filter()
    says so in its message): kube-scheduler counts the others as unresolvable without a reason."""
    if unresolvable:
        return FilterOutcome([], {candidates[0]: message} if candidates else {}, unresolvable=True,
                             everywhere=len(candidates))
    return FilterOutcome([], dict.fromkeys(candidates, message))


def gang_message(plan: GangPlan, reason: str) -> str:
    """`reason`, prefixed once with the gang's key and summary."""
    prefix = f"gang {plan.key} ({plan.summary})"
    return reason if reason.startswith(prefix) else f"{prefix}: {reason}"
