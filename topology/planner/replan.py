"""Re-planning a few slots of an existing plan (their planned node disappeared, or their pod failed):
every other slot stays where it is and pins its groups, so a slot returns to its segment's domain when
that has room, else to the nearest domain its group's required level allows."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from ..groups import Slot
from ..plan import Plan, PlanInput
from .gang import plan_gang


def replan_slots(inp: PlanInput, plan: Plan, slots: Iterable[Slot], *, reserved: bool = False) -> Plan:
    """A new plan for the gang where `slots` are placed again and every other planned slot keeps its
    node. `inp` describes the cluster now (a vanished node is simply absent from the usable masks).
    With reserved=False, inp.free does not count the plan's own pods that are not running yet (they are
    subtracted here); with reserved=True it already does, for every slot but those re-planned."""
    again = set(slots)
    unknown = again - set(inp.tree.slots())
    if unknown:
        names = ", ".join(sorted(str(slot) for slot in unknown))
        return Plan(placed=False, reason=f"slots {names} are not slots of gang {inp.tree.key}")
    kept = {slot: node for slot, node in plan.slots.items() if slot not in again}
    free = inp.free
    if not reserved:
        free = np.array(inp.free, dtype=np.int64, copy=True)
        for slot, node in kept.items():
            if slot not in inp.bound:
                free[node] -= inp.requests[slot.role]
    pinned = {**kept, **{slot: node for slot, node in inp.bound.items() if slot not in again}}
    result = plan_gang(replace(inp, free=free, bound=pinned))
    result.details["replanned"] = sorted(str(slot) for slot in again)
    result.details["bound"] = sum(1 for slot in result.slots if slot in inp.bound and slot not in again)
    return result
