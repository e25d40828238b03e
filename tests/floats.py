"""Comparing results recorded in another environment: floats to a relative 1e-12, the rest exactly.

Two environments on the same code can differ in the last digits of a float: numpy picks its SIMD
kernels per CPU (measured: up to 1.5e-14 relative between an AVX-512 machine and the one that
recorded the golden files), and the project image's Debian Python against the host's (measured:
last-digit differences in heterogeneous-frequency weights, same numpy and glibc). A change in what
is computed moves a number by far more. Within one environment the project promises more, the last
digit (HTTP against in process, `--jobs`, a LocalCluster), and those tests compare exactly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

FLOAT_RTOL = 1e-12
"""About 100x the largest difference measured between two environments."""


def same(got: object, want: object, scale: float = 0.0) -> bool:
    """Equal structure and values; floats within ``FLOAT_RTOL`` of each other, relative to the
    larger of their own size and ``scale``: a vector's elements are compared at the vector's
    largest size, since an element that cancels to near 0 (a frequency estimate of -3.8e-8 in a
    vector of 0.47) keeps the absolute rounding error of the terms that cancelled."""
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and got.keys() == want.keys()
            and all(same(got[k], want[k]) for k in want)
        )
    if isinstance(want, list):
        size = max((abs(w) for w in want if isinstance(w, float)), default=0.0)
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(same(g, w, size) for g, w in zip(got, want, strict=True))
        )
    if isinstance(want, float) and isinstance(got, float):
        return math.isclose(got, want, rel_tol=FLOAT_RTOL, abs_tol=FLOAT_RTOL * scale)
    return type(got) is type(want) and got == want


def same_cell(got: str, want: str) -> bool:
    """Two CSV cells: equal text, or equal as JSON values (numbers, lists) under ``same``."""
    if got == want:
        return True
    try:
        return same(json.loads(got), json.loads(want))
    except json.JSONDecodeError:
        return False


def same_rows(got: Sequence[Sequence[str]], want: Sequence[Sequence[str]]) -> bool:
    """Two CSV tables: the same shape, every cell ``same_cell``."""
    return len(got) == len(want) and all(
        len(g) == len(w) and all(same_cell(a, b) for a, b in zip(g, w, strict=True))
        for g, w in zip(got, want, strict=True)
    )
