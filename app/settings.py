"""Service settings: environment variables (prefix TAS_) overridden by `tas-extender serve` flags."""
from __future__ import annotations

import os
import re
import types
from typing import Annotated, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from topology.planner import policy_named

from .ports import WatchedKind, watched_kinds

LOG_LEVELS = ("debug", "info", "warning", "error")
PREEMPTION_MODES = ("on", "off", "dry-run")


EXTRA_KIND_FORMAT = "<plural>.<group>/<version>=<Kind>"
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_PARTS = (("plural", re.compile(_DNS_LABEL)), ("group", re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")),
          ("version", re.compile(_DNS_LABEL)), ("Kind", re.compile(r"[A-Za-z][A-Za-z0-9]*")))


def parse_extra_kind(entry: str) -> WatchedKind:
    """One --extra-kinds entry, `trainers.example.com/v1=Trainer`, as a namespaced WatchedKind."""
    def invalid(why: str) -> ValueError:
        return ValueError(f"{setting_names('extra_kinds')}: entry {entry!r} is invalid: {why}; expected "
                          f"{EXTRA_KIND_FORMAT}, e.g. trainers.example.com/v1=Trainer")
    resource, equals, kind = entry.partition("=")
    resource, slash, version = resource.partition("/")
    plural, dot, group = resource.partition(".")
    if not (equals and slash and dot):
        raise invalid(f"missing {'=<Kind>' if not equals else '/<version>' if not slash else '.<group>'}")
    for (name, pattern), value in zip(_PARTS, (plural, group, version, kind)):
        if not pattern.fullmatch(value):
            raise invalid(f"{name} {value!r} is not valid")
    return WatchedKind(group, version, plural, kind, True)


def parse_extra_kinds(text: str) -> tuple[WatchedKind, ...]:
    """A comma-separated list of entries (blank entries are ignored)."""
    return tuple(parse_extra_kind(entry.strip()) for entry in text.split(",") if entry.strip())


def _default_lease_namespace() -> str:
    return os.environ.get("POD_NAMESPACE") or "tas-system"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TAS_", extra="forbid")

    host: str | None = None                  # 127.0.0.1 standalone (its write endpoint), 0.0.0.0 in a cluster
    port: int = Field(8888, ge=1, le=65535)
    url_prefix: str = "/scheduler"
    tls_cert: str | None = None
    tls_key: str | None = None
    # the CA of kube-scheduler's client certificate: the verbs are then served on verbs_port to its holders only
    client_ca: str | None = None
    verbs_port: int = Field(8889, ge=1, le=65535)
    insecure_verbs: bool = False             # cluster mode without client_ca: serve the verbs to anyone (warned)
    debug_port: int = Field(8890, ge=1, le=65535)    # cluster mode: /debug and /ui on 127.0.0.1 only
    # seconds a request's head and body may take to arrive, on every listener; then the connection is closed
    request_timeout: float = Field(10.0, gt=0, le=3600, allow_inf_nan=False)
    # /readyz turns unready this many seconds before the serving certificate's notAfter (0: at its end)
    tls_expiry_margin: float = Field(3600.0, ge=0, allow_inf_nan=False)
    cluster: str | None = None               # a cluster dump for standalone mode
    demo_size: int | None = None             # standalone: a generated demo fleet of this many nodes
    kubeconfig: str | None = None
    in_cluster: bool = False
    reservation_ttl: float = Field(300.0, gt=0)
    strategy: str = "binpack"                # a registered placement policy (topology/planner/policies/)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    leader_elect: bool = False
    lease_name: str = "tas-extender"
    lease_namespace: str = Field(default_factory=_default_lease_namespace)
    # a leader sent SIGTERM releases its Lease and answers until another replica holds it (at most this long),
    # then handover_drain seconds more while the Service moves to that replica (app/listeners.py)
    handover_timeout: float = Field(15.0, ge=0, le=3600, allow_inf_nan=False)
    handover_drain: float = Field(5.0, ge=0, le=3600, allow_inf_nan=False)
    # the scheduler profile(s) whose pods the extender binds, comma-separated; the webhook sets the first
    scheduler_name: str = "tas-scheduler"
    set_scheduler_name: bool = False         # the webhook sets spec.schedulerName on topology pods
    preemption: Literal["on", "off", "dry-run"] = "on"
    # prioritize for pods of no gang that request GPUs: binpack fills partly used nodes and domains first so
    # that whole nodes, racks and blocks stay free for gangs; spread the reverse; neutral scores 5 everywhere
    plain_pods: Literal["binpack", "spread", "neutral"] = "binpack"
    max_request_bytes: int = Field(128 * 2**20, ge=1024)
    webhook_owner_grace: float = Field(30.0, ge=0)   # seconds the webhook denies pods whose owner is not cached yet
    # seconds a held gang pod waits for its next sibling (never over 5 ms a call). 0, the default: refused at
    # once, retried as its siblings arrive; measured faster than holding, and holds nothing (docs/native.md)
    member_wait: float = Field(0.0, ge=0, le=1)
    # where PodGroups are served, gate our gangs with a native PodGroup (kube-scheduler waits for the members)
    native_gate: Literal["auto", "on", "off"] = "auto"
    # seconds a gang may run below its minimum (some pods bound, too few) before its pods are evicted and it
    # is planned again whole, as KAI's stalegangeviction; negative: never (a PodGroup or annotation overrides)
    staleness_grace_period: float = Field(60.0, allow_inf_nan=False)
    # webhook: gate (spec.schedulingGates) the pods of a gang known not to fit at admission, so kube-scheduler
    # does not retry it on every cluster event; lifted when it fits, and after gate_unfit_bound seconds anyway
    gate_unfit_gangs: bool = True
    gate_unfit_bound: float = Field(60.0, gt=0, allow_inf_nan=False)
    # custom workload kinds to watch besides WATCHED_KINDS: "trainers.example.com/v1=Trainer,..."
    extra_kinds: Annotated[tuple[WatchedKind, ...], NoDecode] = ()

    @field_validator("url_prefix")
    @classmethod
    def _normalise_prefix(cls, value: str) -> str:
        value = "/" + value.strip("/")
        return "" if value == "/" else value

    @field_validator("scheduler_name")
    @classmethod
    def _check_scheduler_names(cls, value: str) -> str:
        names = [name.strip() for name in value.split(",")]
        if not all(names):
            raise ValueError(f"{setting_names('scheduler_name')}: {value!r} has an empty name; give one "
                             f"scheduler profile name or several separated by commas")
        return ",".join(names)

    @field_validator("extra_kinds", mode="before")
    @classmethod
    def _parse_extra_kinds(cls, value):
        if isinstance(value, str):
            return parse_extra_kinds(value)
        if isinstance(value, (list, tuple)):
            return tuple(parse_extra_kind(v.strip()) if isinstance(v, str) else v for v in value)
        return value

    @field_validator("strategy")
    @classmethod
    def _check_strategy(cls, value: str) -> str:
        return policy_named(value).name          # ValueError naming the registered policies

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_level(cls, value):
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_tls_pair(self) -> "Settings":
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError(f"{setting_names('tls_cert')} and {setting_names('tls_key')} must be given together")
        if self.demo_size is not None:
            from topology.demo import fleet_problem
            if self.cluster or self.mode == "kubernetes":
                raise ValueError("--demo-size is a standalone demo: give it without --cluster, --kubeconfig "
                                 "or --in-cluster")
            problem = fleet_problem(self.demo_size)
            if problem:
                raise ValueError(problem)
        if self.host is None:
            self.host = "0.0.0.0" if self.mode == "kubernetes" else "127.0.0.1"
        return self

    @property
    def watched_kinds(self) -> tuple[WatchedKind, ...]:
        """What the service lists and watches in a cluster: WATCHED_KINDS, then extra_kinds."""
        return watched_kinds(self.extra_kinds)

    @property
    def scheduler_names(self) -> tuple[str, ...]:
        """The scheduler profiles whose pods the extender binds (the first is the one the webhook sets)."""
        return tuple(self.scheduler_name.split(","))

    @property
    def mode(self) -> str:
        """'kubernetes' when a cluster API is configured, else 'standalone'."""
        return "kubernetes" if (self.kubeconfig or self.in_cluster) else "standalone"



# ---- errors: one line per problem, naming the flag, the variable and what is valid ---------------------

def setting_names(field: str) -> str:
    """`--reservation-ttl (TAS_RESERVATION_TTL)`: how a user sets `field` (serve's flags are the fields')."""
    return f"--{field.replace('_', '-')} ({Settings.model_config['env_prefix']}{field.upper()})"


def settings_problems(error: ValidationError) -> list[str]:
    """Each problem of a ValidationError of Settings as one sentence naming the flag and the environment
    variable, the value given and the values that are valid (from the field's type and bounds)."""
    return [_problem(problem) for problem in error.errors()]


def _problem(problem: dict) -> str:
    message = problem["msg"].removeprefix("Value error, ")
    field = str(problem["loc"][0]) if problem["loc"] else None
    if field not in Settings.model_fields:
        return message                            # a check across settings names its flags itself
    names = setting_names(field)
    if problem["type"] == "value_error":          # our own validators: the message says what is valid
        return message if message.startswith(names) else f"{names}: {message}"
    given = problem.get("input")
    expected = expected_values(field)
    return f"{names}: {given!r} is not valid; " + (f"expected {expected}" if expected else message[:1].lower()
                                                   + message[1:])


def expected_values(field: str) -> str | None:
    """What `field` accepts, in words: `an integer from 1 to 65535`, `one of on, off, dry-run`, ..."""
    info = Settings.model_fields[field]
    kind = _without_none(info.annotation)
    if get_origin(kind) is Literal:
        return "one of " + ", ".join(str(value) for value in get_args(kind))
    if kind is bool:
        return "true or false"
    if kind not in (int, float):
        return None
    noun = "an integer" if kind is int else "a number"
    if any(getattr(meta, "allow_inf_nan", True) is False for meta in info.metadata):
        noun = "a finite number"
    bound = {name: getattr(meta, name) for meta in info.metadata for name in ("ge", "gt", "le", "lt")
             if isinstance(meta, (Ge, Gt, Le, Lt)) and hasattr(meta, name)}
    if "ge" in bound and "le" in bound:
        return f"{noun} from {bound['ge']} to {bound['le']}"
    words = {"ge": "of at least", "gt": "over", "le": "at most", "lt": "under"}
    limits = ", ".join(f"{words[name]} {value}" for name, value in bound.items())
    return f"{noun} {limits}" if limits else noun


def _without_none(kind):
    if get_origin(kind) in (Union, types.UnionType):
        kinds = [k for k in get_args(kind) if k is not type(None)]
        return kinds[0] if len(kinds) == 1 else kind
    return kind
