"""AdmissionReview in and out: parse what the API server sends, build the one answer it accepts.

The API server accepts a response only when it is an AdmissionReview of the same apiVersion with the
request's uid echoed and `allowed` set. A denial carries a Status (code + message) that kubectl shows
as "admission webhook ... denied the request: <message>"; warnings are shown to the client as-is.
"""
from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.wire import describe_errors

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
MAX_WARNING_CHARS = 256          # the API server may truncate longer warnings


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


class GroupVersionKind(_Model):
    group: str = ""
    version: str
    kind: str


class GroupVersionResource(_Model):
    group: str = ""
    version: str
    resource: str


class UserInfo(_Model):
    username: str = ""
    uid: str = ""
    groups: list[str] = Field(default_factory=list)


class AdmissionRequest(_Model):
    uid: str = Field(min_length=1)
    kind: GroupVersionKind
    resource: GroupVersionResource
    sub_resource: str = Field("", alias="subResource")
    request_kind: GroupVersionKind | None = Field(None, alias="requestKind")
    request_resource: GroupVersionResource | None = Field(None, alias="requestResource")
    name: str = ""
    namespace: str = ""
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    user_info: UserInfo = Field(default_factory=UserInfo, alias="userInfo")
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = Field(None, alias="oldObject")
    dry_run: bool = Field(False, alias="dryRun")
    options: dict[str, Any] | None = None


class AdmissionReview(_Model):
    api_version: Literal["admission.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


class MalformedReview(ValueError):
    """A body that is not a valid admission.k8s.io/v1 AdmissionReview. `uid` and `api_version` are
    whatever could be recovered, so the answer can still be addressed to the API server."""

    def __init__(self, message: str, uid: str | None = None, api_version: str = API_VERSION):
        super().__init__(message)
        self.uid = uid
        self.api_version = api_version


def parse_review(body: bytes | str) -> AdmissionReview:
    """The review in `body`, or MalformedReview with a message naming the bad fields."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise MalformedReview(f"request body is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise MalformedReview(f"request body must be an AdmissionReview object, got {type(data).__name__}")
    uid, api_version = _recover_address(data)
    if data.get("apiVersion") != API_VERSION:
        raise MalformedReview(f"apiVersion={data.get('apiVersion')!r} is not supported; valid: {API_VERSION!r} "
                              "(set admissionReviewVersions: [v1] in the webhook configuration)", uid, api_version)
    try:
        return AdmissionReview.model_validate(data)
    except ValidationError as error:
        raise MalformedReview(f"invalid AdmissionReview: {describe_errors(error)}", uid, api_version) from None


def _recover_address(data: Mapping) -> tuple[str | None, str]:
    request = data.get("request")
    uid = request.get("uid") if isinstance(request, Mapping) else None
    api_version = data.get("apiVersion")
    if not (isinstance(api_version, str) and api_version.startswith("admission.k8s.io/")):
        api_version = API_VERSION
    return (uid if isinstance(uid, str) and uid else None), api_version


def encode_patch(operations: Sequence[Mapping]) -> str:
    return base64.b64encode(orjson.dumps(list(operations))).decode("ascii")


def build_response(uid: str, *, allowed: bool = True, patch: Sequence[Mapping] = (),
                   warnings: Iterable[str] = (), message: str | None = None, code: int | None = None,
                   reason: str | None = None, api_version: str = API_VERSION) -> dict:
    """The AdmissionReview the API server expects back.

    `patch` is a list of RFC 6902 operations; patchType and the base64 patch are present only when it is
    not empty (and only on an allowed answer). A denial gets a Status with `message` and `code`.
    """
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if allowed and patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = encode_patch(patch)
    if not allowed or message:
        status: dict[str, Any] = {"message": message or "denied"}
        if not allowed:
            status["status"] = "Failure"
            status["code"] = code or 403
            if reason:
                status["reason"] = reason
        response["status"] = status
    warning_list = [_clean_warning(w) for w in warnings]
    if warning_list:
        response["warnings"] = warning_list
    return {"apiVersion": api_version, "kind": KIND, "response": response}


def _clean_warning(text: str) -> str:
    """One line of printable text, short enough not to be truncated by the API server."""
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_WARNING_CHARS else line[: MAX_WARNING_CHARS - 3] + "..."
