"""Issue 29: one owner of gang and slot state. Every write to a GangPlan or a SlotState, and every change of
the PlanStore, is made by app/state/gangs.py (GangBook); the engine, the preemptor and the state's event
handlers call its methods. Checked on the source (any module of app/) and at run time (a scenario that
plans, binds, re-plans, preempts and expires gangs)."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import app
from app.state.plans import GangPlan, PlanStore, SlotState

APP = Path(app.__file__).parent
OWNER = APP / "state" / "gangs.py"
MODEL = APP / "state" / "plans.py"             # the dataclasses' own methods (note, refresh_status)

SLOT_FIELDS = {"node", "status", "pod", "reserved"}
PLAN_FIELDS = {"tree", "status", "topology", "slots", "groups", "reason", "summary", "created", "expires",
               "refused_generation", "refusal", "never_fits", "notes", "lagging", "preemption", "owner"}
# fields only plans and slots have: any write to them outside the owner is a plan or slot write
ONLY_PLANS = {"slots", "groups", "expires", "refused_generation", "refusal", "never_fits", "lagging", "preemption",
              "reserved"}
MUTATORS = {"note", "refresh_status"}                      # GangPlan methods that change it
STORE_MUTATORS = {"put", "pop"}                            # PlanStore methods that change it
# Other objects with a field of the same name (written by their own code, not a plan or a slot):
OTHER_OBJECTS = {("app/scheduling/preemptor.py", "preemption.status"), ("app/scheduling/preemptor.py", "active.status"),
                 ("app/scheduling/planning.py", "result.reason"),          # topology.plan.Plan, the planner's answer
                 ("app/offline/simulate.py", "job.reason"), ("app/offline/simulate.py", "job.never_fits")}


def _target_names(node: ast.AST):
    if isinstance(node, (ast.Tuple, ast.List)):
        for element in node.elts:
            yield from _target_names(element)
    elif isinstance(node, ast.Subscript):
        yield from _target_names(node.value)
    elif isinstance(node, ast.Attribute):
        yield node


def plan_writes(source: str, where: str) -> list[str]:
    """`file:line expression` of each write to a plan or slot field, or change of the plan store."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            for attribute in _target_names(target):
                text = ast.unparse(attribute)
                if attribute.attr not in SLOT_FIELDS | PLAN_FIELDS or (where, text) in OTHER_OBJECTS:
                    continue
                if isinstance(attribute.value, ast.Name) and attribute.value.id == "self" \
                        and attribute.attr not in ONLY_PLANS:
                    continue            # an object's own field of that name (ports.BindConflict.node, ...)
                found.append(f"{where}:{node.lineno} {text}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner, method = node.func.value, node.func.attr
            owner_text = ast.unparse(owner)
            if method in MUTATORS and not owner_text.endswith("book") \
                    or method in STORE_MUTATORS and owner_text.endswith("plans") \
                    or method in ("pop", "setdefault", "clear", "update", "append") \
                    and isinstance(owner, ast.Attribute) and owner.attr in ("lagging", "slots", "notes", "groups"):
                found.append(f"{where}:{node.lineno} {ast.unparse(node.func)}()")
    return sorted(found, key=lambda write: int(write.split(":")[1].split(" ")[0]))


def test_only_the_gang_book_writes_plans_slots_and_the_plan_store():
    offenders = [write for path in sorted(APP.rglob("*.py")) if path not in (OWNER, MODEL)
                 for write in plan_writes(path.read_text(), path.relative_to(APP.parent).as_posix())]
    assert offenders == []


def test_the_source_check_sees_a_write_from_elsewhere():
    """The check above can fail: writes such as the engine made before the book existed are found."""
    sample = ("def replan(plan, state, slot, store, preemption):\n"
              "    state.node, state.status = None, 'unplaced'\n"
              "    plan.expires = 3\n"
              "    plan.lagging.pop(slot, None)\n"
              "    plan.note('moved')\n"
              "    store.plans.put(plan)\n"
              "    preemption.status = 'evicting'\n")
    assert [w.split(" ", 1)[1] for w in plan_writes(sample, "app/scheduling/preemptor.py")] == [
        "state.node", "state.status", "plan.expires", "plan.lagging.pop()", "plan.note()", "store.plans.put()"]


@pytest.fixture
def writes_outside_the_book(monkeypatch):
    """Every run-time write to a plan or slot field (after construction) from a module other than the book."""
    seen: list[str] = []
    book, model = str(OWNER), str(MODEL)

    def guarded(cls):
        original = cls.__setattr__

        def __setattr__(self, name, value):
            frame = inspect.currentframe().f_back
            if name in self.__dict__ and frame.f_code.co_filename not in (book, model):
                seen.append(f"{cls.__name__}.{name} from {frame.f_code.co_filename}:{frame.f_lineno}")
            original(self, name, value)
        monkeypatch.setattr(cls, "__setattr__", __setattr__)

    guarded(GangPlan)
    guarded(SlotState)
    for method in ("put", "pop"):
        original = getattr(PlanStore, method)

        def checked(self, *args, _original=original, _method=method):
            frame = inspect.currentframe().f_back
            if frame.f_code.co_filename not in (book, model):
                seen.append(f"PlanStore.{_method} from {frame.f_code.co_filename}:{frame.f_lineno}")
            return _original(self, *args)
        monkeypatch.setattr(PlanStore, method, checked)
    return seen


def test_scenarios_write_plans_and_slots_only_through_the_book(writes_outside_the_book):
    """Plans, binds, deletions, re-plans, expiry, stale gangs (the stateful test), preemption and its
    refusals, a shrinking workload, a pod the cluster moves: every write came from the book."""
    from hypothesis import settings as hypothesis_settings
    from hypothesis.stateful import run_state_machine_as_test

    import test_extender_cluster_moves as moves
    import test_preemption_service as preemption
    from test_service_stateful import ServiceUnderEvents
    run_state_machine_as_test(ServiceUnderEvents, settings=hypothesis_settings(
        max_examples=10, stateful_step_count=40, deadline=None))
    for scenario in (preemption.test_seed_story_end_to_end,
                     preemption.test_refused_eviction_picks_again_without_that_gang,
                     preemption.test_dry_run_only_reports,
                     preemption.test_the_hold_survives_a_cluster_rebuild_while_victims_terminate,
                     moves.test_a_pod_of_another_scheduler_on_a_reserved_node_moves_the_unbound_slots_inside_the_domain,
                     moves.test_a_job_scaled_down_drops_its_plan_and_one_scaled_up_or_only_updated_keeps_it):
        scenario()
    assert writes_outside_the_book == []


def test_the_run_time_check_sees_a_write_from_elsewhere(writes_outside_the_book):
    plan = GangPlan("ns/g", tree=None, status="planned")
    plan.reason = "written here"
    assert writes_outside_the_book and writes_outside_the_book[0].startswith("GangPlan.reason from ")
