"""Service settings: environment variables (prefix TAS_) overridden by `tas-extender serve` flags."""
from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from topology.plan import STRATEGIES

LOG_LEVELS = ("debug", "info", "warning", "error")
PREEMPTION_MODES = ("on", "off", "dry-run")


def _default_lease_namespace() -> str:
    return os.environ.get("POD_NAMESPACE") or "tas-system"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TAS_", extra="forbid")

    host: str = "0.0.0.0"
    port: int = Field(8888, ge=1, le=65535)
    url_prefix: str = "/scheduler"
    tls_cert: str | None = None
    tls_key: str | None = None
    cluster: str | None = None               # a cluster dump for standalone mode
    kubeconfig: str | None = None
    in_cluster: bool = False
    reservation_ttl: float = Field(300.0, gt=0)
    strategy: Literal["binpack", "spread"] = "binpack"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    leader_elect: bool = False
    lease_name: str = "tas-extender"
    lease_namespace: str = Field(default_factory=_default_lease_namespace)
    scheduler_name: str = "tas-scheduler"
    set_scheduler_name: bool = False         # the webhook sets spec.schedulerName on topology pods
    preemption: Literal["on", "off", "dry-run"] = "on"
    max_request_bytes: int = Field(128 * 2**20, ge=1024)
    webhook_owner_grace: float = Field(30.0, ge=0)   # seconds the webhook denies pods whose owner is not cached yet

    @field_validator("url_prefix")
    @classmethod
    def _normalise_prefix(cls, value: str) -> str:
        value = "/" + value.strip("/")
        return "" if value == "/" else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_level(cls, value):
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_tls_pair(self) -> "Settings":
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key must be given together (--tls-cert and --tls-key)")
        return self

    @property
    def mode(self) -> str:
        """'kubernetes' when a cluster API is configured, else 'standalone'."""
        return "kubernetes" if (self.kubeconfig or self.in_cluster) else "standalone"


assert set(STRATEGIES) == {"binpack", "spread"}
