"""``python -m benchmarks.eval``: see :mod:`benchmarks.eval.run`."""

from benchmarks.eval.run import main

raise SystemExit(main())
