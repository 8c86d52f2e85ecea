"""What kube-scheduler's `--pod-max-in-unschedulable-pods-duration` costs with gangs waiting (issue 40, the
parked member): on a real control plane, one run, the two settings side by side.

    TAS_K8S_ASSETS=/work/k8s python benchmarks/bench_unschedulable_flush.py [--waiting 32] [--window 120]

A full cluster (16 nodes of 8 GPUs, filled by 16 bound 4-pod gangs), then `--waiting` more 4-pod Jobs whose
gangs cannot fit (refused by the extender, or by NodeResourcesFit alone) and as many single-GPU pods of no
gang (NodeResourcesFit alone), none gated (`--gate-unfit-gangs false`). tas-scheduler is started once with
kube-scheduler's default (5 min) and once with `15s`; after a minute's settling, each is measured over
`--window` seconds of quiet: its CPU seconds, its scheduling attempts (scheduler_schedule_attempts_total) and
the extender's filter calls. docs/troubleshooting.md says why the install does not set the flag: the flush it
bounds skips the one pod it was meant for (held at the async-preemption gate). Other work shares this machine:
compare the two settings within one run only.
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "e2e")]

from cluster import E2ECluster, scheduler_config  # noqa: E402
from controlplane import ControlPlane, find_binaries  # noqa: E402
from workloads import container, indexed_job, topology  # noqa: E402

SETTINGS = {"default (5m)": (), "15s": ("--pod-max-in-unschedulable-pods-duration=15s",)}
NODES = {f"n{z}{r}{n}": (f"zone-{z}", f"block-{z}", f"rack-{z}{r}") for z in "ab" for r in "12" for n in "1234"}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100          # utime + stime, in clock ticks of 1/100 s


def counter(text: str, family: str) -> float:
    return sum(float(value) for value in re.findall(rf"^{family}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def filter_calls(cluster: E2ECluster) -> float:
    return counter("\n".join(line for line in cluster.metrics().splitlines() if 'verb="filter"' in line),
                   "tas_extender_request_seconds_count")


def restart_scheduler(cluster: E2ECluster, args: tuple[str, ...]):
    plane = cluster.plane
    for old in [p for p in plane.processes if p.name == "tas-scheduler"]:
        old.stop()
        plane.processes.remove(old)
    return plane.start_scheduler("tas-scheduler", scheduler_config(cluster.verbs_url,
                                 plane.certs.ca_crt.read_bytes(), cluster.scheduler_client), args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiting", type=int, default=32, help="gangs (and as many plain pods) left waiting")
    parser.add_argument("--window", type=float, default=120.0, help="seconds measured per setting")
    parser.add_argument("--settle", type=float, default=60.0, help="seconds after the scheduler's start")
    args = parser.parse_args()
    binaries, reason = find_binaries()
    if reason:
        sys.exit(reason)
    with tempfile.TemporaryDirectory(prefix="bench-flush-") as folder:
        plane = ControlPlane(binaries, Path(folder)).start()
        cluster = E2ECluster(plane, extender_args=("--gate-unfit-gangs", "false"))
        try:
            cluster.install()
            cluster.add_gpu_nodes(NODES)
            cluster.create_namespace("bench")
            full = [indexed_job(f"fill-{i}", 4, 2, topology(required="rack")) for i in range(16)]
            cluster.apply(full, namespace="bench")
            cluster.wait_bound("bench", 64, timeout=300)
            waiting = [indexed_job(f"wait-{i}", 4, 2, topology(required="rack")) for i in range(args.waiting)]
            plain = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"plain-{i}"},
                      "spec": {"schedulerName": "tas-scheduler", "containers": [container(1)],
                               "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}
                     for i in range(args.waiting)]
            cluster.apply(waiting + plain, namespace="bench")
            rows = []
            for name, flags in SETTINGS.items():
                scheduler = restart_scheduler(cluster, flags)
                time.sleep(args.settle)
                text = plane.scheduler_metrics(scheduler)
                before = (cpu_seconds(scheduler.popen.pid), counter(text, "scheduler_schedule_attempts_total"),
                          filter_calls(cluster))
                time.sleep(args.window)
                text = plane.scheduler_metrics(scheduler)
                after = (cpu_seconds(scheduler.popen.pid), counter(text, "scheduler_schedule_attempts_total"),
                         filter_calls(cluster))
                rows.append((name, *(b - a for a, b in zip(before, after))))
            pending = args.waiting * 5
            print(f"{pending} pods waiting ({args.waiting} gangs of 4, {args.waiting} plain), {args.window:g} s "
                  f"measured per setting")
            print(f"{'setting':<14} {'CPU s':>7} {'CPU %':>6} {'attempts':>9} {'filter calls':>13}")
            for name, cpu, attempts, filters in rows:
                print(f"{name:<14} {cpu:>7.2f} {100 * cpu / args.window:>5.1f}% {attempts:>9.0f} {filters:>13.0f}")
        finally:
            cluster.stop()
            plane.stop()


if __name__ == "__main__":
    main()
