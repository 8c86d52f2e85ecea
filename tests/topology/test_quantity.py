"""Kubernetes quantities: parsed exactly as apimachinery's resource.Quantity, rounded up to matrix units."""
from fractions import Fraction

import pytest

from topology.quantity import QuantityError, format_units, parse_quantity, resource_units

GI = 2**30


@pytest.mark.parametrize("text, millicores", [
    ("500m", 500), ("2", 2000), ("1.5", 1500), ("0.1", 100), (".5", 500), ("+1", 1000),
    ("100u", 1),          # 0.1m rounds up to 1m, like Quantity.MilliValue()
    ("1500000n", 2),      # 1.5m rounds up
    ("1k", 1_000_000), (2, 2000), (1.5, 1500), ("250m", 250),
])
def test_cpu_in_millicores(text, millicores):
    assert resource_units("cpu", text) == millicores


@pytest.mark.parametrize("text, units", [
    ("16Gi", 16 * GI), ("1G", 10**9), ("512Mi", 512 * 2**20), ("1Ki", 1024), ("1k", 1000),
    ("1e3", 1000), ("1E3", 1000), ("1e+3", 1000), ("2e-1", 1),      # 0.2 byte rounds up
    ("1E", 10**18), ("1Ei", 2**60), ("1P", 10**15), ("1Pi", 2**50), ("1T", 10**12), ("1Ti", 2**40),
    ("1.5Gi", 3 * GI // 2), (".5", 1), ("+1", 1), ("0", 0), ("1M", 10**6), ("1Mi", 2**20),
    (1024, 1024),
])
def test_memory_and_counts_in_whole_units(text, units):
    assert resource_units("memory", text) == units


def test_extended_resources_are_counted_in_whole_units():
    assert resource_units("nvidia.com/gpu", "8") == 8
    assert resource_units("nvidia.com/gpu", 4) == 4
    assert resource_units("pods", "110") == 110


def test_parse_keeps_the_exact_value():
    assert parse_quantity("1.5") == Fraction(3, 2)
    assert parse_quantity("100u") == Fraction(1, 10_000)
    assert parse_quantity("1E3") == 1000 and parse_quantity("1E") == 10**18


@pytest.mark.parametrize("text", ["abc", "1Gb", "1 Gi", "", "1e", "1.2.3", "Gi", "--1", "1gi", "1KI", "e3", "1m3"])
def test_invalid_quantities_name_the_text_and_the_valid_suffixes(text):
    with pytest.raises(QuantityError) as err:
        resource_units("memory", text)
    assert repr(text) in str(err.value)
    assert "Ki Mi Gi" in str(err.value)


def test_booleans_are_not_quantities():
    with pytest.raises(QuantityError, match="True"):
        parse_quantity(True)


@pytest.mark.parametrize("resource, units, text", [
    ("cpu", 1500, "1500m"), ("cpu", 2000, "2"), ("memory", 16 * GI, "16Gi"), ("memory", 512 * 2**20, "512Mi"),
    ("memory", 1000, "1000"), ("nvidia.com/gpu", 8, "8"), ("hugepages-2Mi", 2**21, "2Mi"), ("memory", 0, "0"),
])
def test_format_units(resource, units, text):
    assert format_units(resource, units) == text
    assert resource_units(resource, text) == units


def test_a_mapping_is_not_a_quantity():
    with pytest.raises(QuantityError, match="not a number"):
        resource_units("cpu", {"value": 1})


def test_repeated_quantities_give_the_same_answer():
    assert [resource_units("cpu", "1.5") for _ in range(3)] == [1500] * 3
    assert resource_units("memory", "1") == 1 and resource_units("cpu", "1") == 1000
    with pytest.raises(QuantityError):
        resource_units("cpu", True)
    assert resource_units("cpu", 1) == 1000


@pytest.mark.parametrize("text", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_floats_are_quantity_errors(text):
    # YAML `.inf` loads as a float; the error must be a QuantityError that says what is wrong
    with pytest.raises(QuantityError, match="not a finite number"):
        resource_units("memory", text)


@pytest.mark.parametrize("text", ["1e100000", "1E-100000", "5e101"])
def test_exponents_out_of_range_are_refused_before_computing_them(text):
    with pytest.raises(QuantityError, match=r"exponent .* is out of range \(-100 to 100\)"):
        parse_quantity(text)
    assert parse_quantity("1e100") == 10 ** 100 and parse_quantity("1e-100") == Fraction(1, 10 ** 100)
