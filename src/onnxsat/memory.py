"""The process's own memory, read where Linux shows it: what the e-graph's memory limit and memory-sized
batches measure, and the batch size that memory allows."""

from __future__ import annotations

import os
from collections.abc import Iterator


def resident_mib() -> float:
    """The process's current resident memory (Linux ``/proc``; 0 where it cannot be read)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


BATCH_MEMORY_MIB = 1024
"""What one batch's run may add to the process's memory. A dynamic batch is cut to the largest power of two
whose samples fit, each counted at what a run of two samples added after a run of one: DNSMOS's 9-second
clips take 150 MB each in ONNX Runtime, and 32 of them at once peaked at 3.7 GB and ran 29% slower per sample
than one at a time; calibrating on 26 at once peaked at 9.4 GB."""


def memory_sized_batch(requested: int, per_sample_mib: float) -> int:
    """``requested``, or the largest power of two below it whose samples take at most :data:`BATCH_MEMORY_MIB`
    (at least 1); ``requested`` as it is when the growth could not be seen (0 or less: memory freed earlier
    was reused, or ``/proc`` is not there)."""
    if per_sample_mib <= 0 or requested * per_sample_mib <= BATCH_MEMORY_MIB:
        return requested
    fits = max(1, int(BATCH_MEMORY_MIB // per_sample_mib))
    return 1 << (fits.bit_length() - 1)


def memory_sized_slices(count: int, requested: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of consecutive batches over ``count`` samples, for a caller that runs each batch before
    asking for the next: one sample, then two, then batches of what memory allows (:func:`memory_sized_batch`
    of ``requested``), measured by what the run of two added after the run of one."""
    start, size, after_one = 0, 1, 0.0
    while start < count:
        stop = min(count, start + size)
        yield start, stop
        if start == 0:  # one sample ran: two next
            after_one, size = resident_mib(), min(2, requested)
        elif start == 1:  # two ran: what they added sizes the rest
            size = memory_sized_batch(requested, resident_mib() - after_one)
        start = stop


def batch_slices(count: int, requested: int, fixed: int | None = None) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of consecutive batches over ``count`` samples: of ``fixed`` samples each when given (a
    model's own batch; the last may be shorter), else :func:`memory_sized_slices` of ``requested``."""
    if fixed:
        return ((start, min(count, start + fixed)) for start in range(0, count, fixed))
    return memory_sized_slices(count, requested)
