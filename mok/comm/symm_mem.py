"""Real peers: one rank per process, buffers every rank of a process group can address.

Two :class:`~mok.comm.peers.PeerGroup` implementations live here, both with ``local_ranks == [rank]``:

* :class:`SymmetricMemoryPeers` (CUDA): PyTorch symmetric memory. Each buffer is one ``symm_mem.empty``
  allocation per rank, exchanged with ``symm_mem.rendezvous``; ``views[r]`` is rank r's allocation mapped
  into this process (NVLink peer access), ``ptr_table`` holds the same addresses for kernels, and
  :meth:`SymmetricMemoryPeers.barrier` is the handle's device-side barrier on the current stream.
* :class:`HostSharedPeers` (CPU): the same contract over process-shared host memory (files in ``/dev/shm``
  mapped by every rank) with a ``torch.distributed`` barrier. It exists so the peer-memory data path (one-sided
  pulls and pushes, the barrier protocol) runs and is tested with several CPU processes under gloo.

NVLink multicast stays off: importing this module sets ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``,
``NCCL_NVLS_ENABLE=0`` and ``NVSHMEM_DISABLE_NVLS=1`` unless already set, and :func:`require_multicast_off`
refuses to build a group if any of them was set to enable it. Nothing here uses multimem instructions or the
multicast pointer. (NCCL reads its variable when a communicator is created, so import this module, or
:mod:`mok.distributed`, before the first collective; ``python -m mok.dist_cli`` does.)
"""

from __future__ import annotations

import os
import shutil
import tempfile

import torch
import torch.distributed as dist

from .peers import PeerBuffer, PeerGroup

# Multicast-off settings and the value that keeps multicast off.
MULTICAST_OFF = {"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1"}

for _name, _value in MULTICAST_OFF.items():
    os.environ.setdefault(_name, _value)


def require_multicast_off() -> None:
    """Raise if the environment enables NVLink multicast (NVLS) for torch symmetric memory, NCCL or NVSHMEM."""
    wrong = {k: os.environ.get(k) for k, v in MULTICAST_OFF.items() if os.environ.get(k) != v}
    if wrong:
        want = " ".join(f"{k}={v}" for k, v in MULTICAST_OFF.items())
        raise RuntimeError(f"NVLink multicast must stay off for mok's peer memory; found {wrong}. Set {want}")


def _group_rank_and_size(group) -> tuple[int, int]:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialised: call torch.distributed.init_process_group "
                           "(torchrun sets up the environment) before building a peer group")
    return dist.get_rank(group), dist.get_world_size(group)


def symmetric_memory_available(device: torch.device | str | None = None) -> tuple[bool, str]:
    """``(True, "")`` if PyTorch symmetric memory can be used on ``device``, else ``(False, reason)``.

    Only checks what can be checked without a collective (CUDA present, the module importable)."""
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    if device is not None and torch.device(device).type != "cuda":
        return False, f"device {device} is not a CUDA device"
    try:
        # NOTE: `from ... import`, not `import torch.distributed._symmetric_memory`: the latter binds `torch`
        # as a local name of this function and breaks the torch.cuda lookup above.
        from torch.distributed import _symmetric_memory  # noqa: F401
    except ImportError as err:
        return False, f"torch.distributed._symmetric_memory is unavailable: {err}"
    return True, ""


class SymmetricMemoryPeers(PeerGroup):
    """One rank per process (one GPU each); buffers in PyTorch symmetric memory.

    Args:
        group: the ``torch.distributed`` process group (``None``: the default group). NCCL is the usual
            backend; the rendezvous only needs the group's store.
        device: this rank's CUDA device (default: the current CUDA device).

    ``buffer(...)`` is a collective: every rank of the group must request the same buffers in the same order
    with the same shape and dtype (the buffers are symmetric). A buffer is allocated once and reused while its
    shape and dtype stay the same; asking for another shape under the same name allocates a new one.
    """

    def __init__(self, group=None, device: torch.device | str | None = None) -> None:
        require_multicast_off()
        ok, why = symmetric_memory_available(device)
        if not ok:
            raise RuntimeError(f"SymmetricMemoryPeers needs PyTorch symmetric memory: {why}")
        from torch.distributed import _symmetric_memory as symm_mem

        self._symm_mem = symm_mem
        self.group = group if group is not None else dist.group.WORLD
        self.rank, self.world_size = _group_rank_and_size(self.group)
        self.device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
        self._buffers: dict[str, PeerBuffer] = {}
        self.handles: dict[str, object] = {}
        # A dedicated small buffer whose handle carries the barrier's signal pad, so barriers never share
        # a signal pad with a buffer a kernel may be signalling on.
        self.buffer("__mok_sync__", (1,), torch.int32)

    @property
    def local_ranks(self) -> list[int]:
        return [self.rank]

    def _rendezvous(self, tensor: torch.Tensor):
        """Exchange ``tensor``'s allocation with the group (by group name: every torch release takes one)."""
        name = self.group.group_name
        try:
            return self._symm_mem.rendezvous(tensor, name)
        except RuntimeError:
            # Releases before the group registry was automatic need the group enabled first.
            enable = getattr(self._symm_mem, "enable_symm_mem_for_group", None)
            if enable is None:
                raise
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                enable(name)
            return self._symm_mem.rendezvous(tensor, name)

    def buffer(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> PeerBuffer:
        """Rank-symmetric buffer ``name`` (collective on first request; see the class docstring).

        Returns a :class:`PeerBuffer` whose ``views[r]`` is rank r's ``shape``/``dtype`` tensor (mapped peer
        memory for r != rank) and whose ``ptr_table`` is an int64 ``[world_size]`` tensor on this device with
        the address of ``views[r][0]`` as seen from this GPU."""
        shape = tuple(int(s) for s in shape)
        existing = self._buffers.get(name)
        if existing is not None and existing.shape == shape and existing.dtype == dtype:
            return existing
        local = self._symm_mem.empty(shape, dtype=dtype, device=self.device)
        handle = self._rendezvous(local)
        # With the symmetric memory pool a tensor may start past its allocation's base; the allocations are
        # symmetric, so the same offset holds on every rank. Checked below through our own rank's view.
        offset_bytes = local.data_ptr() - int(handle.buffer_ptrs[self.rank])
        if offset_bytes < 0 or offset_bytes % local.element_size():
            raise RuntimeError(f"symmetric buffer {name!r}: the tensor lies {offset_bytes} bytes from its "
                               f"allocation's base, not a whole number of elements past it")
        element_offset = offset_bytes // local.element_size()
        own = handle.get_buffer(self.rank, shape, dtype, element_offset)
        if own.data_ptr() != local.data_ptr():
            raise RuntimeError(f"symmetric buffer {name!r}: get_buffer(own rank) is at {own.data_ptr():#x}, "
                               f"the local tensor at {local.data_ptr():#x}")
        views = [local if r == self.rank else handle.get_buffer(r, shape, dtype, element_offset)
                 for r in range(self.world_size)]
        addresses = [v.data_ptr() for v in views]
        ptrs = torch.tensor(addresses, dtype=torch.int64, device=self.device)
        buf = PeerBuffer(name, shape, dtype, views, ptrs, remote=self.world_size > 1)
        self._buffers[name] = buf
        self.handles[name] = handle
        return buf

    def barrier(self) -> None:
        """Device-side barrier on the current CUDA stream: work enqueued after it on any rank sees every write
        that any rank enqueued before it (peer stores included). The host does not wait."""
        self.handles["__mok_sync__"].barrier(channel=0)


class HostSharedPeers(PeerGroup):
    """One rank per process on the CPU; buffers in process-shared memory (for tests and CPU runs under gloo).

    Each buffer is one file per rank under a directory in ``/dev/shm`` (made by rank 0, its path broadcast),
    mapped ``shared=True`` by every rank, so a write through ``views[peer]`` lands in the peer's memory, as a
    store through NVLink would. :meth:`barrier` is ``torch.distributed.barrier`` on the group; the system call
    inside it orders each rank's earlier stores before its peers' later loads.
    """

    def __init__(self, group=None) -> None:
        self.group = group if group is not None else dist.group.WORLD
        self.rank, self.world_size = _group_rank_and_size(self.group)
        self.device = torch.device("cpu")
        self._buffers: dict[str, PeerBuffer] = {}
        self._generation = 0
        root = [tempfile.mkdtemp(prefix="mok-peers-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
                if self.rank == 0 else None]
        dist.broadcast_object_list(root, src=dist.get_global_rank(self.group, 0), group=self.group)
        self._root = root[0]

    @property
    def local_ranks(self) -> list[int]:
        return [self.rank]

    def _path(self, name: str, generation: int, rank: int) -> str:
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
        return os.path.join(self._root, f"{safe}.{generation}.rank{rank}")

    def buffer(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> PeerBuffer:
        """Rank-symmetric buffer ``name`` (collective on first request); see :class:`SymmetricMemoryPeers`."""
        shape = tuple(int(s) for s in shape)
        existing = self._buffers.get(name)
        if existing is not None and existing.shape == shape and existing.dtype == dtype:
            return existing
        self._generation += 1
        numel = max(1, int(torch.Size(shape).numel()))

        def mapped(rank: int) -> torch.Tensor:
            flat = torch.from_file(self._path(name, self._generation, rank), shared=True, size=numel, dtype=dtype)
            return flat[:int(torch.Size(shape).numel())].view(shape)

        local = mapped(self.rank)   # creates this rank's file
        dist.barrier(group=self.group)  # every rank's file exists before anyone maps a peer's
        views = [local if r == self.rank else mapped(r) for r in range(self.world_size)]
        ptrs = torch.tensor([v.data_ptr() for v in views], dtype=torch.int64)
        buf = PeerBuffer(name, shape, dtype, views, ptrs, remote=self.world_size > 1)
        self._buffers[name] = buf
        return buf

    def barrier(self) -> None:
        dist.barrier(group=self.group)

    def close(self) -> None:
        """Unmap every buffer and (rank 0, after a barrier) delete the shared files. Collective."""
        self._buffers.clear()
        dist.barrier(group=self.group)
        if self.rank == 0:
            shutil.rmtree(self._root, ignore_errors=True)


__all__ = ["HostSharedPeers", "MULTICAST_OFF", "SymmetricMemoryPeers", "require_multicast_off",
           "symmetric_memory_available"]
