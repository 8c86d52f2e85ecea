"""The two Python CEL libraries on a DeviceClass selector of the DRA environment, side by side:
`common-expression-language` (Rust `cel` crate) and `cel-python` (pure Python, optional: skipped when absent).
Prints microseconds per device evaluated and whether both agree on each expression."""
from __future__ import annotations

import time

from topology.demo import dra_slice
from topology.dra import CEL_FUNCTIONS, _device, selectors_match

import cel

EXPRESSIONS = [
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'",
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
    "device.attributes['gpu.nvidia.com'].index < 4 && device.attributes['gpu.nvidia.com'].type != 'mig'",
    "'driverVersion' in device.attributes['gpu.nvidia.com'] && "
    "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))",
]


def rust(devices, rounds):
    programs = [cel.compile(e) for e in EXPRESSIONS]
    start = time.process_time()
    answers = [[selectors_match([p], d) for d in devices] for _ in range(rounds) for p in programs]
    return (time.process_time() - start) / (rounds * len(devices) * len(programs)) * 1e6, answers[:len(programs)]


def python(devices, rounds):
    import celpy
    from celpy import celtypes
    env = celpy.Environment()
    wrap = {"quantity": lambda s: celtypes.IntType(CEL_FUNCTIONS["quantity"](str(s))),
            "semver": lambda s: celtypes.ListType([celtypes.IntType(x) for x in CEL_FUNCTIONS["semver"](str(s))]),
            "compareTo": lambda a, b: celtypes.IntType((a > b) - (a < b)),
            "isGreaterThan": lambda a, b: celtypes.BoolType(a > b)}
    programs = [env.program(env.compile(e), functions=wrap) for e in EXPRESSIONS]
    values = [celpy.json_to_cel(d.cel_value()) for d in devices]
    start = time.process_time()
    answers = [[_answer(p, v) for v in values] for _ in range(rounds) for p in programs]
    return (time.process_time() - start) / (rounds * len(devices) * len(programs)) * 1e6, answers[:len(programs)]


def _answer(program, value):
    try:
        return bool(program.evaluate({"device": value}))
    except Exception as err:      # noqa: BLE001 - counted as a wrong answer, named below
        return f"error: {err.args[0] if err.args else err}"


def main() -> None:
    raw = dra_slice("node-00001", mig=True)["spec"]["devices"]
    devices = [_device(d, "gpu.nvidia.com", "node-00001", "bench") for d in raw]
    rust_us, rust_answers = rust(devices, 20)
    print(f"common-expression-language: {rust_us:8.1f} us per (expression, device)  ({len(devices)} devices, "
          f"{len(EXPRESSIONS)} expressions)")
    try:
        python_us, python_answers = python(devices, 2)
    except ImportError:
        print("cel-python not installed: pip install cel-python to compare")
        return
    print(f"cel-python:                 {python_us:8.1f} us per (expression, device)")
    for expression, mine, theirs in zip(EXPRESSIONS, rust_answers, python_answers):
        if mine != theirs:
            print(f"  differ on {expression}: cel-python {next(t for m, t in zip(mine, theirs) if m != t)}")
    agree = rust_answers == python_answers
    print(f"verdict: answers {'agree on every expression' if agree else 'differ (above)'}; "
          f"common-expression-language is {python_us / rust_us:.0f}x faster per evaluation")


if __name__ == "__main__":
    main()
