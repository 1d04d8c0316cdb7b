"""The process's own memory, read where Linux shows it: what the e-graph's memory limit and memory-sized
batches measure."""

from __future__ import annotations

import os


def resident_mib() -> float:
    """The process's current resident memory (Linux ``/proc``; 0 where it cannot be read)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
