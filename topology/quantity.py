"""Kubernetes resource quantities, parsed exactly as apimachinery's resource.Quantity does.

cpu is counted in millicores, every other resource in whole units (bytes for memory),
both rounded up like Quantity.MilliValue() / Quantity.Value().
"""
from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")
_EXPONENT = re.compile(r"^[eE]([+-]?[0-9]+)$")

VALID_SUFFIXES = "Ki Mi Gi Ti Pi Ei n u m k M G T P E, or an exponent such as e3"
MAX_EXPONENT = 100          # far beyond any real amount (int64 ends near 9.2e18)
MAX_UNITS = 2**63 - 1       # the largest int64, what Kubernetes (and the capacity matrices) hold


class QuantityError(ValueError):
    """A quantity string that Kubernetes would reject."""


def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity such as '500m', '1.5', '16Gi', '1e3'."""
    if isinstance(text, bool):
        raise QuantityError(f"quantity {text!r} is not a number")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise QuantityError(f"quantity {text!r} is not a finite number")
        return Fraction(str(text))
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise QuantityError(f"quantity {text!r} is not a number with an optional suffix ({VALID_SUFFIXES})")
    number, suffix = match.groups()
    value = Fraction(number)
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix in _DECIMAL:
        return value * _DECIMAL[suffix]
    exponent = _EXPONENT.match(suffix)
    if exponent:
        power = int(exponent.group(1))
        if abs(power) > MAX_EXPONENT:      # 10**power of a hostile "1e999999999" would stall the process
            raise QuantityError(f"quantity {text!r}: exponent {power} is out of range "
                                f"(-{MAX_EXPONENT} to {MAX_EXPONENT})")
        return value * Fraction(10) ** power
    raise QuantityError(f"quantity {text!r} has unknown suffix {suffix!r}; valid: {VALID_SUFFIXES}")


def resource_units(resource: str, quantity: str | int | float) -> int:
    """Integer amount in the unit the capacity matrices use: millicores for cpu, whole units otherwise."""
    if isinstance(quantity, (str, int, float)):
        return _cached_units(resource, quantity)
    return _units(resource, quantity)          # e.g. a mapping by mistake: parse_quantity says what is wrong


def _units(resource: str, quantity: str | int | float) -> int:
    value = parse_quantity(quantity)
    if value < 0:
        raise QuantityError(f"quantity {quantity!r} is negative; expected an amount >= 0")
    units = math.ceil(value * 1000 if resource == "cpu" else value)
    if units > MAX_UNITS:
        unit = "millicores" if resource == "cpu" else "units"
        raise QuantityError(f"quantity {quantity!r} is too large; expected at most 2^63-1 {unit}")
    return units


_cached_units = functools.lru_cache(maxsize=4096, typed=True)(_units)   # nodes repeat the same few strings


def format_units(resource: str, units: int) -> str:
    """Human form of an amount from the matrices (for explanations and the debug API)."""
    if resource == "cpu":
        return f"{units}m" if units % 1000 else str(units // 1000)
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if units and units % size == 0:
                return f"{units // size}{suffix}"
    return str(units)
