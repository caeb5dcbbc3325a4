"""``python -m reliability.supervisor CHILDREN_JSON``: the stack supervisor of ``usl up``
(:func:`deploy.stack.supervise`) over the children the fault suite names, so each sink kind
runs in its own process and can be killed alone. Settings come from the environment."""

from __future__ import annotations

import json
import sys

from deploy.stack import supervise
from streams.settings import Settings


def main() -> None:
    children = {str(name): [str(arg) for arg in args] for name, args in json.loads(sys.argv[1]).items()}
    supervise(Settings.from_env(), children, {})


if __name__ == "__main__":
    main()
