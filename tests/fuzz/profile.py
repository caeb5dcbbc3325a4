"""The hypothesis settings every fuzz test uses, and the strategies several of them share.

The default example counts keep ``tests/fuzz/`` to a couple of minutes on a small machine;
``USL_FUZZ_SCALE=20`` multiplies every count for a long run (nightly, or before a release).
The settings are a registered profile applied per test, never loaded globally, so the other
property tests of the suite keep their own counts.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = ["SCALE_ENV", "fuzz", "json_values"]

SCALE_ENV = "USL_FUZZ_SCALE"

settings.register_profile(
    "usl-fuzz",
    deadline=None,
    # Fuzz inputs are large and slow to generate on purpose; that is not a test smell here.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much, HealthCheck.large_base_example,
                           HealthCheck.function_scoped_fixture],
    print_blob=True,
)


def fuzz(max_examples: int, **overrides: Any) -> settings:
    """The ``usl-fuzz`` profile with ``max_examples`` scaled by ``USL_FUZZ_SCALE``."""
    scale = float(os.environ.get(SCALE_ENV) or 1)
    return settings(settings.get_profile("usl-fuzz"), max_examples=max(1, int(max_examples * scale)),
                    **overrides)


def json_values(*, keys: st.SearchStrategy[str] | None = None, max_leaves: int = 20) -> st.SearchStrategy[Any]:
    """Any JSON value: scalars at the edges of their types, lists and objects of them."""
    scalars = (
        st.none() | st.booleans()
        | st.integers(min_value=-(2**63), max_value=2**63 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=30)
        | st.sampled_from(["", "\x00", "2026-01-31T12:00:00Z", "9999-12-31T23:59:59-01:00",
                           "0001-01-01T00:00:00+01:00", "user", "assistant", "tool", "*"])
    )
    names = keys if keys is not None else st.text(max_size=12)
    return st.recursive(
        scalars,
        lambda children: st.lists(children, max_size=4) | st.dictionaries(names, children, max_size=5),
        max_leaves=max_leaves,
    )
