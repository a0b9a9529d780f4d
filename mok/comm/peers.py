"""Peer buffers: memory every rank can address on every other rank.

MoK's transfers are loads and stores into a peer's buffer: pull-dispatch reads ``x`` on the source rank,
push-combine writes into the source rank's combine slots. The kernels therefore only need, for each logical
buffer, the base address on every rank (a pointer table) and the shape it has there (the same on all ranks:
the buffers are symmetric).

``PeerGroup`` hands out such buffers. :class:`EmulatedPeers` keeps ``world_size`` ranks in one process on one
device, each rank with its own allocation, so everything above this layer (schedule, ring, kernels) runs as it
would across GPUs; the real-GPU groups (PyTorch symmetric memory, NVSHMEM) live beside this module and give
the same interface with one local rank each.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch


@dataclass
class PeerBuffer:
    """One symmetric buffer: the same shape and dtype on every rank.

    ``views[r]`` is rank r's buffer as a tensor this process can read and write (every rank when emulated;
    on real GPUs, the local buffer and the peers' mapped ones). ``ptr_table`` is an int64 tensor of the ranks'
    base addresses on the kernel's device, for kernels that pick the peer at run time. ``remote``: some views
    are other ranks' memory, on another GPU (NVLink) or in another process (host shared memory): what a kernel
    saves by reading a row once is then link traffic (mok.triton_ref.pull_dispatch.pull_order).
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    views: list[torch.Tensor]
    ptr_table: torch.Tensor = field(repr=False)
    remote: bool = False

    def __getitem__(self, rank: int) -> torch.Tensor:
        return self.views[rank]

    @property
    def world_size(self) -> int:
        return len(self.views)


class PeerGroup(ABC):
    """A set of ranks that can address each other's buffers."""

    world_size: int
    device: torch.device

    @property
    @abstractmethod
    def local_ranks(self) -> list[int]:
        """The ranks this process drives: all of them when emulated, one on a real GPU."""

    @abstractmethod
    def buffer(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> PeerBuffer:
        """A symmetric buffer, allocated on first request and reused when shape and dtype match (the
        fixed buffers of MoK: allocated once, never resized on the hot path). Contents are undefined."""

    def barrier(self) -> None:
        """Every rank's preceding writes are visible to every rank after this returns."""


class EmulatedPeers(PeerGroup):
    """``world_size`` ranks in one process: rank r's buffers are separate allocations on ``device``."""

    def __init__(self, world_size: int, device: torch.device | str = "cpu") -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        self.world_size = world_size
        self.device = torch.device(device)
        self._buffers: dict[str, PeerBuffer] = {}

    @property
    def local_ranks(self) -> list[int]:
        return list(range(self.world_size))

    def buffer(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> PeerBuffer:
        shape = tuple(int(s) for s in shape)
        existing = self._buffers.get(name)
        if existing is not None and existing.shape == shape and existing.dtype == dtype:
            return existing
        views = [torch.empty(shape, dtype=dtype, device=self.device) for _ in range(self.world_size)]
        ptrs = torch.tensor([v.data_ptr() for v in views], dtype=torch.int64, device=self.device)
        buf = PeerBuffer(name, shape, dtype, views, ptrs)
        self._buffers[name] = buf
        return buf

    def barrier(self) -> None:
        # One process, one stream: program order already orders every rank's writes.
        pass
