"""The megakernel's error record, read back either at once (synchronising) or later (deferred).

Every bounded wait in the kernel that gives up, and every inconsistency it finds in the schedule, writes an
error record of ``ERROR_WORDS`` int32 (workspace.cuh, ``ErrorWord``): code, counter, rank, index, value seen,
value expected, CTA, ticket. The first error wins; the kernel then runs to its end with garbage results
instead of hanging.

Reading the record is a device-to-host copy. Done right after the launch it blocks the CPU until the kernel
has finished, so the CPU cannot queue the next layer while this one runs. :class:`DeferredErrorChecks` instead
copies the record into pinned host memory with an asynchronous copy and an event, and reads it at a later call
once the event has completed: an error is then reported one call late (naming the launch it came from), but
no call ever waits for the GPU.
"""

from __future__ import annotations

from collections import deque

import torch

ERROR_WORDS = 8
ERROR_CODES = {1: "a bounded wait timed out", 2: "the schedule table is inconsistent"}  # workspace.cuh, ErrorCode
COUNTER_NAMES = {0: "-", 1: "dispatch_done[rank][tile]", 2: "gate_up_tile_done[rank][tile]",
                 3: "gate_up_mb_done[rank][minibatch]", 4: "down_mb_done[rank][minibatch]",
                 5: "pushed[source rank]", 6: "stage full mbarrier", 7: "stage empty mbarrier",
                 8: "task queue full mbarrier", 9: "task queue empty mbarrier",
                 10: "task done mbarrier (signal warp)", 11: "staged rows mbarrier (store warps)",
                 12: "drained staging mbarrier (store warps)", 13: "stores done mbarrier (store warps)",
                 14: "down_step_done[step] (early combine)", 15: "inbox full mbarrier (clusters: a posted task)",
                 16: "inbox empty mbarrier (clusters: the pair scheduler waits for a slot)",
                 17: "peer free mbarrier (clusters: the partner's stage for this CTA's half of B)"}


class Sm90KernelError(RuntimeError):
    """The megakernel recorded an error (its error record, decoded)."""


def describe_error(words: list[int]) -> str:
    """Human-readable form of the kernel's error record (see workspace.cuh, ErrorWord)."""
    code, counter, rank, index, seen, expected, block, ticket = (list(words) + [0] * ERROR_WORDS)[:ERROR_WORDS]
    what = ERROR_CODES.get(code, f"error code {code}")
    return (f"{what}: counter={COUNTER_NAMES.get(counter, counter)} rank={rank} index={index} seen={seen} "
            f"expected={expected} (CTA {block}, ticket {ticket})")


def raise_if_error(words: list[int], where: str = "") -> None:
    """Raise :class:`Sm90KernelError` if ``words`` (an error record read back to the host) holds an error."""
    if words and words[0] != 0:
        raise Sm90KernelError(f"mok SM90 MoE forward{where}: {describe_error(words)}")


class DeferredErrorChecks:
    """Error records of recent launches, copied to pinned host memory without waiting for them.

    :meth:`record` queues an asynchronous copy of a launch's error record on the current stream (skipped
    while a CUDA graph is being captured); :meth:`poll` reads every record whose copy has landed and raises
    for the first error. At most ``max_pending`` records wait; beyond that the oldest is waited for, which
    bounds memory if the CPU runs far ahead.
    """

    def __init__(self, max_pending: int = 64) -> None:
        self.max_pending = max_pending
        self._pending: deque[tuple[torch.cuda.Event, torch.Tensor, int]] = deque()
        self._launches = 0

    def record(self, error: torch.Tensor) -> None:
        """Queue the copy of ``error`` (int32 [ERROR_WORDS] on a CUDA device) after the launch that writes it."""
        if not error.is_cuda or torch.cuda.is_current_stream_capturing():
            return
        self._launches += 1
        host = torch.empty(error.numel(), dtype=torch.int32, pin_memory=True)
        host.copy_(error, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._pending.append((event, host, self._launches))
        while len(self._pending) > self.max_pending:
            self._check_oldest()

    def poll(self, wait: bool = False) -> None:
        """Read every finished record (all of them with ``wait``) and raise for the first error found."""
        while self._pending and (wait or self._pending[0][0].query()):
            self._check_oldest(wait=wait)

    def _check_oldest(self, wait: bool = True) -> None:
        event, host, launch = self._pending.popleft()
        if wait:
            event.synchronize()  # (without wait the event has already completed: query() said so)
        words = host.tolist()
        if words[0] != 0:
            self._pending.clear()  # later launches ran after a failed one: their results mean nothing either
            raise_if_error(words, f" (launch {launch} of this process, reported later: deferred check)")

    def __len__(self) -> int:
        return len(self._pending)


DEFERRED = DeferredErrorChecks()
