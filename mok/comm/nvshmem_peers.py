"""Real peers over NVSHMEM (nvshmem4py): the :class:`~mok.comm.peers.PeerGroup` interface on the symmetric heap.

Optional: needs the ``nvshmem4py-cu13`` wheel and ``cuda-python`` (``cuda.core``), which are not on the GPU
machine by default and must be carried there. Importing this module never fails; :func:`nvshmem_available`
says whether the group can be built.

* Initialisation: rank 0 of the ``torch.distributed`` group makes an NVSHMEM unique id, the group broadcasts it,
  and every rank calls ``nvshmem.core.init(..., initializer_method="uid")`` (one PE per process and GPU).
* ``buffer(name, shape, dtype)``: ``nvshmem.core.tensor`` (a collective allocation on the symmetric heap);
  ``views[r]`` is ``nvshmem.core.get_peer_tensor(local, r)``, the NVLink mapping of PE r's copy.
* ``barrier()``: the current stream is synchronised, then ``torch.distributed.barrier`` on the group. This host
  barrier is slower than a device-side one but orders every rank's earlier peer stores before every rank's
  later loads without relying on stream interop between torch and cuda.core.

NVLink multicast stays off (``NVSHMEM_DISABLE_NVLS=1``, set by :mod:`mok.comm.symm_mem` at import).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from .peers import PeerBuffer, PeerGroup
from .symm_mem import require_multicast_off

try:  # optional dependency
    import nvshmem.core as _nvshmem
except ImportError as _err:  # pragma: no cover - depends on the machine
    _nvshmem = None
    _IMPORT_ERROR = str(_err)
else:
    _IMPORT_ERROR = ""


def nvshmem_available() -> tuple[bool, str]:
    """``(True, "")`` when nvshmem4py imports and a CUDA device exists, else ``(False, reason)``."""
    if _nvshmem is None:
        return False, f"nvshmem4py is not installed ({_IMPORT_ERROR}); carry the nvshmem4py-cu13 wheel"
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    return True, ""


def _cuda_core_device(index: int):
    try:
        from cuda.core import Device
    except ImportError:
        from cuda.core.experimental import Device
    device = Device(index)
    device.set_current()
    return device


class NvshmemPeers(PeerGroup):
    """One PE per process (one GPU each); buffers on the NVSHMEM symmetric heap.

    Args:
        group: the ``torch.distributed`` group whose ranks become the NVSHMEM PEs (``None``: the default
            group; NVSHMEM's world is this group, so build one ``NvshmemPeers`` per process).
        device: this rank's CUDA device (default: the current one).
    """

    def __init__(self, group=None, device: torch.device | str | None = None) -> None:
        ok, why = nvshmem_available()
        if not ok:
            raise RuntimeError(f"NvshmemPeers unavailable: {why}")
        require_multicast_off()
        self.group = group if group is not None else dist.group.WORLD
        self.rank, self.world_size = dist.get_rank(self.group), dist.get_world_size(self.group)
        self.device = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
        self._core_device = _cuda_core_device(self.device.index)

        # The unique id travels as bytes through the torch group.
        uid = _nvshmem.get_unique_id(empty=self.rank != 0)
        payload = [bytes(uid._data.tobytes()) if self.rank == 0 else None]
        dist.broadcast_object_list(payload, src=dist.get_global_rank(self.group, 0), group=self.group)
        if self.rank != 0:
            uid._data.view(np.uint8)[:] = np.frombuffer(payload[0], dtype=np.uint8)
        _nvshmem.init(device=self._core_device, uid=uid, rank=self.rank, nranks=self.world_size,
                      initializer_method="uid")
        self._buffers: dict[str, PeerBuffer] = {}
        self._locals: dict[str, torch.Tensor] = {}

    @property
    def local_ranks(self) -> list[int]:
        return [self.rank]

    def buffer(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> PeerBuffer:
        """Rank-symmetric buffer ``name`` (collective on first request; same contract as
        :meth:`mok.comm.symm_mem.SymmetricMemoryPeers.buffer`)."""
        shape = tuple(int(s) for s in shape)
        existing = self._buffers.get(name)
        if existing is not None and existing.shape == shape and existing.dtype == dtype:
            return existing
        if name in self._locals:  # a new shape: give the old allocation back first (collective)
            _nvshmem.free_tensor(self._locals.pop(name))
        local = _nvshmem.tensor(shape, dtype=dtype)
        views = [local if r == self.rank else _nvshmem.get_peer_tensor(local, r) for r in range(self.world_size)]
        ptrs = torch.tensor([v.data_ptr() for v in views], dtype=torch.int64, device=self.device)
        buf = PeerBuffer(name, shape, dtype, views, ptrs, remote=self.world_size > 1)
        self._buffers[name], self._locals[name] = buf, local
        return buf

    def barrier(self) -> None:
        torch.cuda.current_stream(self.device).synchronize()
        dist.barrier(group=self.group)

    def close(self) -> None:
        """Free every buffer and finalise NVSHMEM (collective)."""
        self.barrier()
        self._buffers.clear()
        for local in self._locals.values():
            _nvshmem.free_tensor(local)
        self._locals.clear()
        _nvshmem.finalize()


__all__ = ["NvshmemPeers", "nvshmem_available"]
