"""DeviceClasses whose CEL selector fails (issue 38): skipped, named in /metrics and /debug/dra with how they
failed (cel-compile, cel-evaluation), from the model built after the class event on."""
import logging

import yaml

from service_helpers import make_client, service
from test_service_dra import dra_cluster


def device_class(name: str, expression: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def post(client, obj: dict) -> None:
    response = client.post("/debug/objects", content=yaml.safe_dump(obj), headers={"content-type": "application/yaml"})
    assert response.status_code == 200, response.text


def test_a_class_whose_cel_fails_at_evaluation_is_named_as_such_in_the_metric_and_debug(caplog):
    """The API server accepts the expression (it compiles); it fails on every GPU (no such attribute)."""
    client = make_client(objects=dra_cluster(broken_class=True))
    state = service(client)
    with caplog.at_level(logging.WARNING):
        post(client, device_class("failing", "device.attributes['gpu.nvidia.com'].nosuch == 'x'"))
        state.refresh()                     # what the stale-model timer does 0.2 s after the event
    metrics = client.get("/metrics").text
    assert 'tas_extender_dra_class_errors{deviceclass="failing",failed="cel-evaluation"} 1.0' in metrics
    assert 'tas_extender_dra_class_errors{deviceclass="broken",failed="cel-compile"} 1.0' in metrics
    dra = client.get("/debug/dra").json()["classes"]
    assert dra["failing"]["failed"] == "cel-evaluation" and "nosuch" in dra["failing"]["error"]
    assert dra["gpu.nvidia.com"]["failed"] is None and dra["gpu.nvidia.com"]["devices"] == 128
    assert any("failing" in r.getMessage() and "nosuch" in r.getMessage() for r in caplog.records)
    post(client, device_class("failing", "device.attributes['gpu.nvidia.com'].type == 'gpu'"))
    state.refresh()
    assert 'deviceclass="failing"' not in client.get("/metrics").text
    assert client.get("/debug/dra").json()["classes"]["failing"]["devices"] == 128


def test_a_class_that_fails_only_on_devices_published_after_it_is_warned_about(caplog):
    """The class comes first, when no slice has devices it fails on; the slices come after (a driver
    starting on new nodes), applied to the model in place: the warning names the class then, once."""
    objects = dra_cluster()
    slices = [o for o in objects if o["kind"] == "ResourceSlice"]
    client = make_client(objects=[o for o in objects if o["kind"] != "ResourceSlice"]
                         + [device_class("failing", "device.attributes['gpu.nvidia.com'].nosuch == 'x'")])
    state = service(client)
    assert "failing" not in state.cluster.devices.errors
    with caplog.at_level(logging.WARNING):
        for obj in slices[:2]:
            post(client, obj)
            state.refresh()
    warned = [r.getMessage() for r in caplog.records if "failing" in r.getMessage()]
    assert len(warned) == 1 and "nosuch" in warned[0], warned
    assert client.get("/debug/dra").json()["classes"]["failing"]["failed"] == "cel-evaluation"
