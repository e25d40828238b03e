"""Memory the process has freed, given back to the system after a study's large steps.

glibc's malloc keeps what a process frees in its heaps for later allocations; only chunks of
its own mapping (arrays of tens of MB) go back at once. A start (the participants joined, the
plan built) and a round's close (a round's reports, its held answers written out) free many
smaller blocks, which stayed in the heaps: the next step's allocations then added to that (at
10^7 participants the server sat at ~500 MiB through the rounds after a start that peaked
higher, and the finish's arrays came on top). ``give_back`` returns what is free (glibc's
``malloc_trim``; nothing elsewhere). Called a few times per study: milliseconds each.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from collections.abc import Callable

__all__ = ["give_back"]


def _trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to give back
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
        return trim
    return None


_TRIM = _trim()


def give_back() -> None:
    """Return the process's free heap memory to the system (glibc), else nothing."""
    if _TRIM is not None:
        _TRIM(0)
