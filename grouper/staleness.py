"""How long a gang may run below its minimum before its pods are evicted (KAI's staleness grace period),
read where KAI users set it. First valid value wins, as KAI's podgrouper reads it:
1. a KAI PodGroup's `spec.stalenessGracePeriod`;
2. the annotation `kai.scheduler/staleness-grace-period` on the workload, then on the gang's pods.
Values are Go durations ("90s", "5m", "1h30m"); a negative one means never. An invalid value is skipped
and reported (KAI logs it and goes on)."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from .names import GRACE_ANNOTATION, KAI_PODGROUP_VERSION_PREFIX

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds of a Go duration ("1m30s", "-1s", "0"); ValueError naming the valid form otherwise."""
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    if body[:1] in ("+", "-"):
        body = body[1:]
    if body == "0":
        return 0.0
    parts = _PART.findall(body)
    if not body or "".join(number + unit for number, unit in parts) != body:
        raise ValueError(f"{text!r} is not a duration; expected a Go duration such as 90s, 5m or 1h30m "
                         f"(units ns, us, ms, s, m, h), negative to never evict")
    return sign * sum(float(number) * _UNITS[unit] for number, unit in parts)


def grace_period(owner: Mapping | None, pods: Sequence[Mapping]) -> tuple[float | None, list[str]]:
    """(seconds from the first valid source, None when none sets one; a message for each invalid value
    met before it, naming where it is)."""
    problems = []
    for where, value in _sources(owner, pods):
        if value is None:
            continue
        try:
            if not isinstance(value, str):
                raise ValueError(f"{value!r} is not a duration string")
            return parse_duration(value), problems
        except ValueError as err:
            problems.append(f"{where}: {err}")
    return None, problems


def _sources(owner: Mapping | None, pods: Sequence[Mapping]):
    if owner is not None:
        metadata = owner.get("metadata") or {}
        described = f"{owner.get('kind')} {metadata.get('namespace')}/{metadata.get('name')}"
        if owner.get("kind") == "PodGroup" and str(owner.get("apiVersion")).startswith(KAI_PODGROUP_VERSION_PREFIX):
            yield f"{described} spec.stalenessGracePeriod", (owner.get("spec") or {}).get("stalenessGracePeriod")
        yield f"{described} annotation {GRACE_ANNOTATION}", (metadata.get("annotations") or {}).get(GRACE_ANNOTATION)
    for pod in pods:
        metadata = pod.get("metadata") or {}
        yield (f"pod {metadata.get('namespace')}/{metadata.get('name')} annotation {GRACE_ANNOTATION}",
               (metadata.get("annotations") or {}).get(GRACE_ANNOTATION))
