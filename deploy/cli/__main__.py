"""``python -m deploy.cli``: the ``usl`` command line (how the local stack starts its processes)."""

from deploy.cli import main

main()
