"""Candidate node names on the wire: checked in one call, validated by the model only for its error
message, and mapped to node masks once per distinct list."""
from __future__ import annotations

import numpy as np
import pytest

from app.extender.names import all_strings, candidate_mask

from service_helpers import make_client, plain_pod, watch


@pytest.fixture(scope="module")
def client():
    return make_client()


@pytest.mark.parametrize(("names", "field"), [
    (["node-01", 7], "NodeNames.1: Input should be a valid string"),
    (["node-01", None], "NodeNames.1: Input should be a valid string"),
    ("node-01", "NodeNames: Input should be a valid list"),
    ({"node-01": 1}, "NodeNames: Input should be a valid list"),
])
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_bad_node_names_get_the_models_error(client, names, field, verb):
    response = client.post(f"/scheduler/{verb}", json={"Pod": plain_pod("p"), "NodeNames": names})
    error = response.json()["Error"] if verb == "filter" else response.headers["X-Extender-Error"]
    assert field in error and "invalid ExtenderArgs" in error


def test_node_names_pass_through_exactly(client):
    names = [f"node-{i:02d}" for i in range(1, 9)]
    watch(client, plain_pod("p"))
    answer = client.post("/scheduler/filter", json={"Pod": plain_pod("p"), "NodeNames": names}).json()
    assert answer["NodeNames"] == names and answer["Error"] == ""
    assert set(answer) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def test_all_strings():
    assert all_strings([]) and all_strings(["a", "b"])
    assert not all_strings(["a", 1]) and not all_strings(None) and not all_strings(("a",))
    assert not all_strings([b"a"])


def test_candidate_mask_follows_the_list_and_the_cluster():
    index = {"a": 0, "b": 1, "c": 2}
    first = candidate_mask(["a", "c", "zzz"], index, 3)
    assert first.tolist() == [True, False, True]
    first[:] = False                                       # the caller's copy: the kept mask is untouched
    assert candidate_mask(["a", "c", "zzz"], index, 3).tolist() == [True, False, True]
    assert candidate_mask(["b"], index, 3).tolist() == [False, True, False]
    rebuilt = {"c": 0, "b": 1, "a": 2}                      # same names, another cluster index
    assert candidate_mask(["b"], rebuilt, 3).tolist() == [False, True, False]
    assert candidate_mask(["a"], rebuilt, 3).tolist() == [False, False, True]
    assert candidate_mask(["a"], {"a": 3, "b": 0}, 4).dtype == np.bool_
