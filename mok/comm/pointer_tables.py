"""Peer pointer tables: int64 ``[R]`` tensors whose entry r is the base address of rank r's buffer.

Kernels load a peer's base pointer from such a table (``tl.load(ptr_table + rank)``, or its CUDA equivalent), so
one table serves every rank. The tables are built without a host synchronisation, so that a layer that builds
them stays CUDA-graph capturable and the host never waits for the GPU. This is the one place that builds them
from local tensors (the Triton pipeline's emulated ranks, the megakernel's stacked rank buffers).
"""

from __future__ import annotations

import torch

# Tables of equally spaced addresses, by (device index, stream handle, base, step, count): a table is a pure
# function of its addresses, so a layer called again on buffers the caching allocator handed out again (the usual
# case) reuses the device tensor instead of making a new one (round 10: building tables cost the host more than
# the kernels). Keyed by stream so that stream order has the table written before any later reader.
# NOTE: that ordering holds for readers on the stream that made the table. A caller that keeps a table and reads it
# on another stream (or after its stream was destroyed and the handle reused) must order that itself, as for any
# tensor made on one stream and read on another. Bounded: cleared when full (entries of freed buffers linger until
# then; they are only addresses). Read-only for everyone who gets a table from it.
_SPACED_TABLES: dict[tuple, torch.Tensor] = {}
_SPACED_TABLES_MAX = 1024


def _addresses(base: int, step: int, count: int, device: torch.device) -> torch.Tensor:
    # One kernel: an arange from base in steps of step (a fill when every entry is the same address).
    if step == 0 or count <= 1:
        return torch.full((count,), base, dtype=torch.int64, device=device)
    return torch.arange(base, base + step * count, step, dtype=torch.int64, device=device)


def spaced_pointer_table(base: int, step: int, count: int, device: torch.device) -> torch.Tensor:
    """int64 ``[count]`` on ``device``, entry r = ``base + r * step`` (byte addresses), without a host
    synchronisation.

    On a GPU it is computed on the device (no host -> device copy) and cached per device and current stream;
    treat it as read-only. Never cached while the current stream captures a CUDA graph: a table made during a
    capture holds its values only once the graph replays.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return _addresses(base, step, count, device)
    with torch.cuda.device(device):
        capturing = torch.cuda.is_current_stream_capturing()
    key = (device.index if device.index is not None else torch.cuda.current_device(),
           torch.cuda.current_stream(device).cuda_stream, base, step, count)
    if not capturing:
        table = _SPACED_TABLES.get(key)
        if table is not None:
            return table
    table = _addresses(base, step, count, device)
    if not capturing:
        if len(_SPACED_TABLES) >= _SPACED_TABLES_MAX:
            _SPACED_TABLES.clear()
        _SPACED_TABLES[key] = table
    return table


def pointer_table(views: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """int64 ``[len(views)]`` on ``device``: entry r is ``views[r].data_ptr()``, made without a host
    synchronisation. Read-only for the caller.

    Equally spaced views (e.g. the dim-0 chunks of one allocation) get :func:`spaced_pointer_table` (computed on
    the device, cached); any other list is copied from the host and never cached.
    """
    addresses = [v.data_ptr() for v in views]
    if not addresses:
        return torch.empty(0, dtype=torch.int64, device=device)
    step = addresses[1] - addresses[0] if len(addresses) > 1 else 0
    if all(b - a == step for a, b in zip(addresses, addresses[1:])):
        return spaced_pointer_table(addresses[0], step, len(addresses), device)
    if torch.device(device).type != "cuda":
        return torch.tensor(addresses, dtype=torch.int64, device=device)
    # NOTE: a blocking host -> device copy would synchronise the stream; from pinned memory it need not
    # (the caching host allocator keeps the pinned block alive until the copy has run). Pinning costs host time
    # (round 10, H200: the profiled Triton backward spent 2.25 ms of its 7.2 ms of host time in is_pinned), hence
    # the equally spaced tables (every emulated-rank buffer) are made on the device and cached instead.
    return torch.tensor(addresses, dtype=torch.int64).pin_memory().to(device, non_blocking=True)


def stacked_pointer_table(stacked: torch.Tensor) -> torch.Tensor:
    """int64 ``[R]`` peer pointer table of ``stacked`` (``[R, ...]``, rank r's buffer is ``stacked[r]``, any
    dim-0 stride): entry r is ``stacked[r].data_ptr()``, on ``stacked``'s device. See
    :func:`spaced_pointer_table`."""
    return spaced_pointer_table(stacked.data_ptr(), stacked.stride(0) * stacked.element_size(), stacked.shape[0],
                                stacked.device)
