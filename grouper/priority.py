"""A pod template's priority as the Priority admission plugin will set it on its pods: the value of the
PriorityClass it names, else of the globalDefault class, else 0 (and the class's preemptionPolicy)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

DEFAULT_POLICY = "PreemptLowerPriority"


def class_priority(spec: Mapping, classes: Iterable[Mapping]) -> tuple[int, str] | None:
    """(priority, preemption policy) for a template without spec.priority; None when the class it names
    is unknown (the pods will tell) or no class applies."""
    by_name = {(c.get("metadata") or {}).get("name"): c for c in classes}
    name = spec.get("priorityClassName")
    if name:
        chosen = by_name.get(name)
    else:
        defaults = [c for c in by_name.values() if c.get("globalDefault") is True]
        # several globalDefault classes: the API server admits pods with the lowest value among them
        chosen = min(defaults, key=lambda c: _value(c) or 0, default=None)
    if chosen is None or _value(chosen) is None:
        return None
    return _value(chosen), spec.get("preemptionPolicy") or chosen.get("preemptionPolicy") or DEFAULT_POLICY


def _value(priority_class: Mapping) -> int | None:
    value = priority_class.get("value")
    return value if isinstance(value, int) and not isinstance(value, bool) else None
