"""One clear sentence for a bad query or path parameter of the debug API and the page, instead of
FastAPI's list of validation errors: the routers use `ClearParameterErrors` as their route class, so every
route they hold answers `400 {"detail": "depth='abc' is not valid: depth must be a whole number of at
least 1."}`, naming the parameter and its valid values."""
from __future__ import annotations

import types
import typing


from fastapi import HTTPException
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute


class ClearParameterErrors(APIRoute):
    def get_route_handler(self):
        handler = super().get_route_handler()
        fields = {f.alias: f for f in [*self.dependant.query_params, *self.dependant.path_params]}

        async def answer(request):
            try:
                return await handler(request)
            except RequestValidationError as err:
                raise HTTPException(400, " ".join(sentence(e, fields) for e in err.errors())) from None
        return answer


def sentence(error: dict, fields: dict) -> str:
    """One validation error as a sentence naming the parameter and what it accepts."""
    where, name = (error["loc"][0], error["loc"][-1]) if error["loc"] else ("", "")
    field = fields.get(name) if where in ("query", "path") else None
    if field is None:
        return f"{'.'.join(map(str, error['loc']))}: {error['msg']}."
    valid = valid_values(field.field_info)
    if error["type"] == "missing":
        return f"{name} is required: give {valid}."
    return f"{name}={error.get('input')!r} is not valid: {name} must be {valid}."


def valid_values(info) -> str:
    kind = _plain(info.annotation)
    bound = {type(m).__name__: m for m in info.metadata}
    if kind is bool:
        return "true or false"
    if kind is int:
        low = bound["Ge"].ge if "Ge" in bound else (bound["Gt"].gt + 1 if "Gt" in bound else None)
        high = bound["Le"].le if "Le" in bound else (bound["Lt"].lt - 1 if "Lt" in bound else None)
        if low is not None and high is not None:
            return f"a whole number from {low} to {high}"
        if low is not None:
            return f"a whole number of at least {low}"
        return f"a whole number of at most {high}" if high is not None else "a whole number"
    if kind is str and "MinLen" in bound:
        shortest = bound["MinLen"].min_length
        return f"a text of at least {shortest} character{'s' if shortest != 1 else ''}"
    return f"{info.description or 'a valid value'}"


def _plain(annotation):
    """int for `int | None`, `Optional[int]` or `list[int]`."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    if typing.get_origin(annotation) is list:
        annotation = typing.get_args(annotation)[0]
    return annotation

