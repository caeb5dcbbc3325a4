"""``usl search`` as a whole process: wall time from exec to exit, through the API and in process.

Run it against a stack that is up (``usl up --detach``) with the same ``USL_HOME``::

    python -m benchmarks.bench_cli --runs 15 "refund rounding"

"api" runs the command as a user would (it finds the local stack's API); "in-process" hides the
API from it (``USL_API_URL`` at a closed port is refused at once, and the command falls back),
which is what every ``usl search`` cost before the CLI learnt to ask the API. The two kinds of
run alternate, so machine load hits both alike; medians and p90 are printed as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

from deploy.jars import free_port


def _time(command: list[str], env: dict[str, str]) -> tuple[float, float] | None:
    """(wall seconds, CPU seconds of the process) of one run, or None when it failed (counted,
    never timed). CPU time barely moves with the machine's load; wall time does."""
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        print(f"{' '.join(command)} exited with {done.returncode}: {done.stderr[-300:]!r}", file=sys.stderr)
        return None
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("query")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--usl", default=os.path.join(os.path.dirname(sys.executable), "usl"))
    args = parser.parse_args()
    command = [args.usl, "search", args.query, "--json"]
    api_env = dict(os.environ)
    local_env = {**os.environ, "USL_API_URL": f"http://127.0.0.1:{free_port()}"}
    _time(command, api_env)  # warm the page cache for both
    _time(command, local_env)
    timings: dict[str, list[float]] = {"api": [], "in-process": []}
    cpu: dict[str, list[float]] = {"api": [], "in-process": []}
    failed = dict.fromkeys(timings, 0)
    for _ in range(args.runs):
        for name, env in (("api", api_env), ("in-process", local_env)):
            measured = _time(command, env)
            if measured is None:
                failed[name] += 1
            else:
                timings[name].append(measured[0])
                cpu[name].append(measured[1])
    report: dict[str, Any] = {}
    for name, values in timings.items():
        values.sort()
        report[name] = {"runs": len(values), "failed": failed[name],
                        "median_s": round(statistics.median(values), 3),
                        "p90_s": round(values[int(0.9 * (len(values) - 1))], 3),
                        "min_s": round(values[0], 3),
                        "cpu_median_s": round(statistics.median(cpu[name]), 3)}
    report["speedup_median"] = round(report["in-process"]["median_s"] / report["api"]["median_s"], 1)
    report["load_average"] = list(os.getloadavg())
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
