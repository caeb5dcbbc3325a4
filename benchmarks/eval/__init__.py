"""The search evaluation on real agent transcripts (``make eval``): data set, metrics, runner.

- :mod:`benchmarks.eval.dataset` rebuilds the set of public transcripts from local snapshots
  of their repositories (the transcripts themselves are never committed);
- :mod:`benchmarks.eval.metrics` holds the pure metric functions (phrase sampling, recall,
  hit@k, MRR, page-split equality) that ``tests/test_eval.py`` checks on tiny inputs;
- :mod:`benchmarks.eval.run` ingests the set into a fresh stack and writes ``EVAL.md`` and
  ``benchmarks/results/eval.json``.
"""
