"""Properties of the webhook's patch over pods with arbitrary labels, annotations, containers and env."""
from __future__ import annotations

import copy

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from app.webhook.admit import Context, admit
from app.state.identities import IdentityCache
from app.webhook.caches import OwnerWaits
from app.webhook.review import AdmissionRequest
from grouper import expand_pods
from webhook_helpers import StandInSettings, make_app, owners, review_of

_, STATE = make_app()
TFJOB = owners()["tf-segments"]
WORKERS = [p for p in expand_pods(TFJOB) if p["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "worker"]
INJECTED_ENV = {"KAI_SEGMENT_INDEX", "KAI_SEGMENT_SIZE", "KAI_SEGMENT_RANK", "KAI_NUM_SEGMENTS", "KAI_TOPOLOGY_NAME",
                "KAI_TOPOLOGY_ZONE", "KAI_TOPOLOGY_BLOCK", "KAI_TOPOLOGY_RACK", "KAI_TOPOLOGY_HOST"}


def context(set_scheduler_name: bool) -> Context:
    return Context(STATE.objects, STATE.cluster.topologies, StandInSettings(set_scheduler_name=set_scheduler_name),
                   OwnerWaits(), IdentityCache())


keys = st.text(alphabet=st.sampled_from("ab/~.-_"), min_size=1, max_size=10)
string_maps = st.one_of(st.none(), st.dictionaries(keys, st.text(max_size=4), max_size=4))
env_names = st.sampled_from(["A", "B", "PATH", "KAI_SEGMENT_INDEX", "KAI_TOPOLOGY_RACK", "KAI_NUM_SEGMENTS"])
env_lists = st.one_of(st.none(), st.lists(st.builds(lambda n, v: {"name": n, "value": v}, env_names,
                                                     st.text(max_size=3)), max_size=4))
containers = st.lists(env_lists, min_size=1, max_size=3)


@settings(max_examples=120, deadline=None)
@given(worker=st.integers(0, 15), extra_labels=string_maps, extra_annotations=string_maps,
       main_env=containers, init_env=st.one_of(st.none(), containers), scheduler=st.booleans())
def test_patch_applies_keeps_user_data_and_is_idempotent(worker, extra_labels, extra_annotations, main_env,
                                                          init_env, scheduler):
    pod = copy.deepcopy(WORKERS[worker])
    metadata = pod["metadata"]
    if extra_labels is None:
        metadata.pop("labels")    # no index label left: the pod cannot be placed; keep the index ones
        metadata["labels"] = {"training.kubeflow.org/replica-type": "worker",
                              "training.kubeflow.org/replica-index": str(worker)}
    else:
        metadata["labels"].update(extra_labels)
    metadata["labels"]["training.kubeflow.org/replica-index"] = str(worker)
    metadata["labels"]["training.kubeflow.org/replica-type"] = "worker"
    if extra_annotations is None:
        metadata.pop("annotations", None)
    else:
        metadata["annotations"] = {**metadata.get("annotations", {}), **extra_annotations}
        metadata["annotations"]["kai.scheduler/segment-size"] = "4"
    pod["spec"]["containers"] = [{"name": f"c{i}", "image": "x", **({"env": e} if e is not None else {})}
                                 for i, e in enumerate(main_env)]
    if init_env is not None:
        pod["spec"]["initContainers"] = [{"name": f"i{i}", "image": "x", **({"env": e} if e is not None else {})}
                                         for i, e in enumerate(init_env)]
    request = AdmissionRequest.model_validate(review_of(pod, "TFJob", seed="prop")["request"])
    ctx = context(scheduler)
    decision = admit(request, ctx)
    assert decision.allowed, decision.message

    result = jsonpatch.apply_patch(request.object, decision.operations)

    labels = result["metadata"]["labels"]
    assert labels["kai.scheduler/subgroup-name"] == f"worker-{worker // 4}"
    assert labels["kai.scheduler/segment-index"] == str(worker // 4)
    for key, value in metadata["labels"].items():
        if not key.startswith("kai.scheduler/"):
            assert labels[key] == value
    annotations = result["metadata"]["annotations"]
    assert annotations["pod-group-name"].startswith("pg-tf-segments-")
    for key, value in (metadata.get("annotations") or {}).items():
        if key != "pod-group-name":
            assert annotations[key] == value
    for list_name in ("initContainers", "containers"):
        for before, after in zip(pod["spec"].get(list_name, []), result["spec"].get(list_name, [])):
            names_before = [v["name"] for v in before.get("env") or []]
            names_after = [v["name"] for v in after.get("env") or []]
            assert names_after[: len(names_before)] == names_before          # user env untouched, in order
            added = names_after[len(names_before):]
            assert set(added) == INJECTED_ENV - set(names_before) and len(added) == len(set(added))
    assert result["spec"]["schedulerName"] == ("tas-scheduler" if scheduler else "default-scheduler")

    again = AdmissionRequest.model_validate({**request.model_dump(by_alias=True), "object": result})
    assert admit(again, ctx).operations == []
