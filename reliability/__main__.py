"""``python -m reliability [--rounds N] [--seed S] [--faults K,...] [--out RELIABILITY.md]``: run the fault suite
and write its figures; exits 1 if any fault was not survived."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import time
from pathlib import Path

from reliability.report import render
from reliability.suite import DEFAULT_FAULT_KINDS, FAULT_KINDS, SCALED_OUT_FAULT_KINDS, run_suite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reliability", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="rounds per fault kind (default 5)")
    parser.add_argument("--seed", type=int, default=1, help="seed of every random choice (default 1)")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs per kill round (default 3)")
    parser.add_argument("--faults", default=",".join(DEFAULT_FAULT_KINDS),
                        help=f"comma-separated fault kinds (default: all, {','.join(DEFAULT_FAULT_KINDS)}; "
                             f"{','.join(SCALED_OUT_FAULT_KINDS)} run on a second stack with two sink shards "
                             f"per shardable kind publishing to an S3Proxy the suite starts)")
    parser.add_argument("--object-store", action="store_true",
                        help="the other faults' sinks publish to the suite's own S3Proxy too")
    parser.add_argument("--out", type=Path, default=None, help="write the report here (e.g. RELIABILITY.md)")
    parser.add_argument("--home", type=Path, default=None, help="state directory (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the state directory (logs, indexes)")
    args = parser.parse_args(argv)
    kinds = tuple(k.strip() for k in args.faults.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown or args.rounds < 1 or args.kills < 1:
        parser.error(f"unknown fault kind(s) {unknown}" if unknown else "--rounds and --kills must be >= 1")
    command = "python -m reliability " + shlex.join(argv if argv is not None else sys.argv[1:])

    def on_term(_signum: int, _frame: object) -> None:
        raise SystemExit(143)  # unwinds, so the stack, the broker and the mounts are cleaned up

    signal.signal(signal.SIGTERM, on_term)

    def log(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)

    def progress(partial: object) -> None:
        if args.out is not None:
            args.out.write_text(render(partial, command.strip()))  # type: ignore[arg-type]

    result = run_suite(rounds=args.rounds, seed=args.seed, kinds=kinds, kills_per_round=args.kills,
                       home=args.home, keep_home=args.keep, log=log, progress=progress,
                       object_store=True if args.object_store else None)
    totals = result.totals()
    log(f"faults injected {totals['injected']}, survived {totals['survived']}, lost {totals['lost']}, "
        f"duplicated {totals['duplicated']}, regressions {totals['regressions']}, "
        f"bad answers {totals['bad_answers']}")
    for problem in result.final.get("problems") or ():
        log(f"problem: {problem}")
    if args.out is not None:
        args.out.write_text(render(result, command.strip()))
        log(f"wrote {args.out}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
