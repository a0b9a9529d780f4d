"""Expert parallelism across processes: :func:`distributed_moe`, what ``MoELayer(..., ep_group=group)`` runs.

Layout (one process per rank, as torchrun starts them): rank r of the group holds ``T_local`` tokens (the same
count on every rank; globally they are tokens ``[r*T_local, (r+1)*T_local)``) and experts
``[r*E_local, (r+1)*E_local)`` with ``E_local = num_experts / world``. Routing ids are global expert ids.

What a call does
----------------
1. **Global routing.** ``topk_ids`` is all-gathered (``T * top_k`` integers, small) and every rank builds the
   same :func:`mok.schedule.build_schedule` tables; each rank then works on its own row of them. Every rank
   therefore knows, without asking, which of its tokens every peer will read and which of its (token, k) slots
   every peer will write.
2. **Transfers**, driven by that one table (:mod:`mok.transfers`), through one of three transports:

   * ``"peers"`` (:class:`~mok.comm.transport.PeerTransport`): real peer memory
     (:class:`mok.comm.symm_mem.SymmetricMemoryPeers` on GPUs, :class:`~mok.comm.symm_mem.HostSharedPeers` on
     CPUs). Each rank publishes ``x``, the router weights and (backward) ``dO`` in its symmetric buffers; after
     a barrier the expert side *pulls* rows straight from the source ranks' buffers and *pushes* results into
     their (token, k) slots, exactly MoK's data flow, with :func:`mok.transfers.pull_rows` /
     :func:`~mok.transfers.push_rows` unchanged; a second barrier ends it.
   * ``"peers-triton"`` (:class:`~mok.comm.transport.TritonPeerTransport`): the same, with the Triton transfer
     kernels of :mod:`mok.triton_ref` (pull dispatch, pull reverse-combine, push rows), which load each row's
     peer base address from the buffer's ``ptr_table``: the transfers the Triton backend and the megakernel
     perform, across processes.
   * ``"collective"`` (:class:`CollectiveTransport`; the default; any backend, gloo included): the same rows
     moved by ``all_to_all_single``. A pull becomes "each source sends the rows the peers' tables ask of it, in
     table order"; a push becomes "each expert rank sends its rows to their sources, which drop them into the
     named slots". Both sides derive the order from the shared table, so no indices travel, and rows travel as
     raw bytes.

3. **Expert arithmetic and the ring walk** are not repeated here: :class:`RankLayerRun` *is*
   :class:`mok.backends.reference.LayerRun` (the code behind ``EmulatedLayerRun``) with one local rank and one
   of the transports above (:mod:`mok.comm.transport`): the same tile products, rounding points, fixed order
   of weight-gradient accumulation, lockstep minibatches through a ring, and backward replay of overwritten
   minibatches.

Because every segment of the schedule lists the same tokens in the same order for any EP degree, and the
transports only copy values, the output and every gradient are **bitwise identical** to single-process
``mok.moe(..., backend="reference", ep_size=world)`` and to ``ep_size=1``, for any number of processes.

Backends: ``"reference"`` (the above), ``"nccl"`` (the all-to-all + grouped-GEMM baseline of
:mod:`mok.backends.nccl_baseline`), ``"triton"`` (:class:`mok.triton_ref.pipeline.TritonRankRun`, the Triton
backend's per-rank run over peer memory) and ``"cuda"`` (:class:`mok.cuda.rank_run.CudaRankRun`: the megakernel,
one launch of this rank's expert tasks pulling and pushing over NVLink, a barrier, one of its combine). The
backward is collective: every rank must run it (as with any ``torch.distributed`` model).

NVLink multicast is kept off (importing :mod:`mok.comm.symm_mem` sets the environment; see there).
"""

from __future__ import annotations

import math
import os

import torch
import torch.distributed as dist

from .backends.layer_run import LayerRunFunction
from .backends.reference import LayerRun
from .checks import check_routing_values, require_tensor, resolve_precision
from .comm.peers import PeerGroup
from .comm.symm_mem import HostSharedPeers, SymmetricMemoryPeers
from .comm.transport import PEER_TRANSPORTS, PeerTransport, Transport, TritonPeerTransport, Window
from .config import MoKConfig
from .schedule import Schedule, build_schedule

BACKENDS = ("reference", "nccl", "triton", "cuda")
TRANSPORTS = ("collective", "peers", "peers-triton")
TRANSPORT_ENV = "MOK_DIST_TRANSPORT"  # default transport for callers that cannot pass one (MoELayer)


# --------------------------------------------------------------------------------------------------------
# Collective helpers
# --------------------------------------------------------------------------------------------------------

def _rows_as_bytes(t: torch.Tensor) -> torch.Tensor:
    """``[N, ...]`` -> ``[N, row_bytes]`` uint8 view (gloo has no int16/bf16 all_to_all for every dtype;
    bytes move everything, bit for bit)."""
    return t.reshape(t.shape[0], math.prod(t.shape[1:])).view(torch.uint8)


def exchange_rows(send: torch.Tensor, send_counts: list[int], recv_counts: list[int], group) -> torch.Tensor:
    """``all_to_all_single`` of whole rows: rows ``send[sum(send_counts[:d]) : ...]`` go to rank d; returns the
    rows received, grouped by source rank (``recv_counts[s]`` from rank s). Any dtype, any trailing shape."""
    send = send.contiguous()
    recv = torch.empty((sum(recv_counts), *send.shape[1:]), dtype=send.dtype, device=send.device)
    dist.all_to_all_single(_rows_as_bytes(recv), _rows_as_bytes(send), recv_counts, send_counts, group=group)
    return recv


class ExchangeRows(torch.autograd.Function):
    """Differentiable :func:`exchange_rows`: the gradient goes back along the same rows, reversed."""

    @staticmethod
    def forward(ctx, send, send_counts, recv_counts, group):
        ctx.counts, ctx.group = (send_counts, recv_counts), group
        return exchange_rows(send, send_counts, recv_counts, group)

    @staticmethod
    def backward(ctx, grad):
        send_counts, recv_counts = ctx.counts
        return exchange_rows(grad, recv_counts, send_counts, ctx.group), None, None, None


def gather_routing(topk_ids_local: torch.Tensor, group) -> torch.Tensor:
    """All-gather the routing: ``[T_local, K]`` local ids -> ``[world * T_local, K]`` in rank order.

    Raises ValueError (on every rank alike) if the ranks hold different token counts or top-k."""
    world = dist.get_world_size(group)
    size = torch.tensor([topk_ids_local.shape[0], topk_ids_local.shape[1]], dtype=torch.int64,
                        device=topk_ids_local.device)
    sizes = [torch.empty_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    sizes = [tuple(s.tolist()) for s in sizes]
    if len(set(sizes)) != 1:
        raise ValueError(f"every rank must hold the same number of tokens and top_k; (T_local, top_k) per "
                         f"rank: {sizes}")
    parts = [torch.empty_like(topk_ids_local) for _ in range(world)]
    dist.all_gather(parts, topk_ids_local.contiguous(), group=group)
    return torch.cat(parts)


# --------------------------------------------------------------------------------------------------------
# The collective transport: the same rows as the peer transports, moved by all_to_all_single
# --------------------------------------------------------------------------------------------------------

class CollectiveTransport(Transport):
    """Pull and push of schedule rows through ``all_to_all_single`` (no peer memory needed): the
    :class:`~mok.comm.transport.Transport` of :mod:`mok.comm.transport` for one local rank.

    Every transfer is a collective over the group: all ranks call it with the same ``windows`` (one row window
    per rank, computed from the shared plans). Sources and expert sides derive the row order from the shared
    schedule, so only values travel. Its "buffers" are plain local tensors.
    """

    kind = "collective"

    def __init__(self, schedule: Schedule, rank: int, group) -> None:
        self.schedule, self.rank, self.group = schedule, rank, group
        self.world = schedule.ep_size
        self.local_ranks = [rank]
        self._routes: dict[tuple[Window, ...], tuple[torch.Tensor, list[int], torch.Tensor, list[int]]] = {}

    def _check(self, rank: int) -> None:
        if rank != self.rank:
            raise ValueError(f"the collective transport of rank {self.rank} was asked to move rank {rank}'s rows")

    def publish(self, name: str, rank: int, local: torch.Tensor) -> torch.Tensor:
        self._check(rank)
        return local

    def slots(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.full(shape, float("nan"), dtype=dtype, device=self.schedule.src_rank.device)

    def local(self, buf: torch.Tensor, rank: int) -> torch.Tensor:
        self._check(rank)
        return buf

    def fence(self) -> None:
        """Nothing to do: each exchange completes before its result is used."""

    def _expert_side(self, window: Window) -> tuple[torch.Tensor, list[int]]:
        """My table rows in ``window`` that hold real entries, grouped by source rank (row order within a
        source), as offsets into the window; and how many come from each source."""
        start, end = window
        src = self.schedule.src_rank[self.rank, start:end].long()
        real = src >= 0
        order = torch.sort(torch.where(real, src, self.world), stable=True).indices
        counts = torch.bincount(src[real], minlength=self.world).tolist()
        return order[:sum(counts)], counts

    def _source_side(self, windows: list[Window]) -> tuple[torch.Tensor, list[int]]:
        """The slots of mine that each rank's window carries (rank-major, row order within a rank), and how
        many each rank's window carries."""
        slots, counts = [], []
        for dest, (start, end) in enumerate(windows):
            from_me = self.schedule.src_rank[dest, start:end] == self.rank
            slots.append(self.schedule.src_slot[dest, start:end][from_me].long())
            counts.append(slots[-1].numel())
        return torch.cat(slots), counts

    def _route(self, windows: list[Window]) -> tuple[torch.Tensor, list[int], torch.Tensor, list[int]]:
        """:meth:`_expert_side` and :meth:`_source_side` of one step's ``windows``, cached: the pulls and pushes
        of a step share them (each reads its counts back to the host)."""
        key = tuple(windows)
        if key not in self._routes:
            self._routes[key] = (*self._expert_side(windows[self.rank]), *self._source_side(windows))
        return self._routes[key]

    def pull(self, rank: int, windows: list[Window], src: torch.Tensor, out: torch.Tensor, *,
             by_token: bool) -> None:
        """``out[j] = src[src_rank][index]`` for my rows ``windows[rank]`` (zero on padding): the collective
        form of :func:`mok.transfers.pull_rows`. ``src`` is this rank's local tensor."""
        self._check(rank)
        out.zero_()
        if all(end <= start for start, end in windows):
            return
        rows, from_sources, slots, to_experts = self._route(windows)
        index = slots // self.schedule.top_k if by_token else slots
        received = exchange_rows(src[index], to_experts, from_sources, self.group)
        out[rows] = received.to(out.dtype)

    def push(self, rank: int, windows: list[Window], values: torch.Tensor, dst: torch.Tensor) -> None:
        """``dst[src_rank][src_slot] = values[j]`` for my real rows: the collective form of
        :func:`mok.transfers.push_rows`. ``dst`` is this rank's local slot tensor."""
        self._check(rank)
        if all(end <= start for start, end in windows):
            return
        rows, from_sources, slots, to_experts = self._route(windows)
        received = exchange_rows(values[rows].to(dst.dtype), from_sources, to_experts, self.group)
        dst[slots] = received


def make_transport(kind: str, schedule: Schedule, rank: int, *, group=None,
                   peers: PeerGroup | None = None) -> Transport:
    """Rank ``rank``'s transport of ``kind`` (:data:`TRANSPORTS`): ``"collective"`` over ``group``, or
    ``"peers"`` / ``"peers-triton"`` over ``peers`` (a group whose only local rank is ``rank``)."""
    if kind == "collective":
        return CollectiveTransport(schedule, rank, group)
    if kind not in PEER_TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got {kind!r}")
    if peers is None:
        raise ValueError(f"transport {kind!r} needs a peer group")
    if list(peers.local_ranks) != [rank]:
        raise ValueError(f"peer group drives ranks {peers.local_ranks}, expected [{rank}]")
    return PEER_TRANSPORTS[kind](schedule, peers)


# --------------------------------------------------------------------------------------------------------
# One rank's share of the layer (reference arithmetic)
# --------------------------------------------------------------------------------------------------------

class RankLayerRun(LayerRun):
    """One forward (and its backward) of the layer on one real rank: :class:`mok.backends.reference.LayerRun`
    (the same per-rank arithmetic and ring walk as :class:`~mok.backends.reference.EmulatedLayerRun`) with
    this process's one rank local and a transport between processes.

    Args:
        x_local: ``[T_local, H]`` this rank's tokens (bf16 or fp32).
        topk_ids: ``[world * T_local, K]`` the global routing (all ranks' ids, rank order).
        topk_weights_local: ``[T_local, K]`` fp32 router weights of this rank's tokens.
        w_gate, w_up: ``[E_local, I, H]``, w_down: ``[E_local, H, I]``: this rank's experts.
        rank, world: this rank and the EP degree. num_experts: E (global).
        config: :class:`MoKConfig` (tile, minibatch, ring, capacity).
        transport: ``"collective"`` (needs ``group``), ``"peers"`` or ``"peers-triton"`` (need ``peers``).

    ``forward()`` returns ``[T_local, H]``; ``backward(grad_out)`` returns ``(dx [T_local, H],
    d_topk_weights [T_local, K] fp32, d_w_gate, d_w_up [E_local, I, H], d_w_down [E_local, H, I])``.
    """

    TRANSPORTS = TRANSPORTS  # every transport

    def __init__(self, x_local, topk_ids, topk_weights_local, w_gate, w_up, w_down, *, rank: int, world: int,
                 num_experts: int, config: MoKConfig, transport: str, group=None,
                 peers: PeerGroup | None = None) -> None:
        schedule = build_schedule(topk_ids, num_experts, world, config.expert_padding, config.capacity_rows)
        super().__init__(x_local, topk_weights_local, w_gate, w_up, w_down, schedule=schedule,
                         transport=make_transport(transport, schedule, rank, group=group, peers=peers),
                         config=config)


# --------------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------------

_DEFAULT_PEERS: dict[tuple[int, str], PeerGroup] = {}


def default_peers(group, device: torch.device) -> PeerGroup:
    """The peer group for ``group`` on ``device``, created on first use (a collective) and cached:
    :class:`SymmetricMemoryPeers` on CUDA, :class:`HostSharedPeers` on CPU."""
    group = group if group is not None else dist.group.WORLD
    key = (id(group), str(device))
    if key not in _DEFAULT_PEERS:
        _DEFAULT_PEERS[key] = (SymmetricMemoryPeers(group, device) if device.type == "cuda"
                               else HostSharedPeers(group))
    return _DEFAULT_PEERS[key]


def release_default_peers() -> None:
    """Close and forget the cached peer groups (collective: every rank calls it, e.g. before
    ``destroy_process_group``); host-shared groups delete their files."""
    for peers in _DEFAULT_PEERS.values():
        close = getattr(peers, "close", None)
        if close is not None:
            close()
    _DEFAULT_PEERS.clear()


def check_local_inputs(x_local, topk_ids_local, topk_weights_local, w_gate, w_up, w_down, *, world: int,
                       num_experts: int) -> None:
    """Shapes, dtypes and devices of one rank's arguments (see :func:`distributed_moe`)."""
    require_tensor("x_local", x_local, 2)
    require_tensor("topk_ids_local", topk_ids_local, 2)
    require_tensor("topk_weights_local", topk_weights_local, 2)
    for name, w in (("w_gate_local", w_gate), ("w_up_local", w_up), ("w_down_local", w_down)):
        require_tensor(name, w, 3)
    tokens, hidden = x_local.shape
    if topk_ids_local.shape[0] != tokens or topk_weights_local.shape != topk_ids_local.shape:
        raise ValueError(f"topk_ids_local and topk_weights_local must both be [T_local={tokens}, top_k]; got "
                         f"{list(topk_ids_local.shape)} and {list(topk_weights_local.shape)}")
    if topk_ids_local.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"topk_ids_local must be int32 or int64, got {topk_ids_local.dtype}")
    if num_experts % world:
        raise ValueError(f"num_experts={num_experts} must be divisible by the group size {world}")
    local_experts, intermediate = num_experts // world, w_gate.shape[1]
    want = {"w_gate_local": (local_experts, intermediate, hidden), "w_up_local": (local_experts, intermediate, hidden),
            "w_down_local": (local_experts, hidden, intermediate)}
    for name, w in (("w_gate_local", w_gate), ("w_up_local", w_up), ("w_down_local", w_down)):
        if tuple(w.shape) != want[name]:
            raise ValueError(f"{name} must have shape {list(want[name])} (num_experts / world = {local_experts} "
                             f"local experts), got {list(w.shape)}")
        if w.dtype != x_local.dtype:
            raise TypeError(f"{name} must have x's dtype {x_local.dtype}, got {w.dtype}")
    for name, t in (("topk_ids_local", topk_ids_local), ("topk_weights_local", topk_weights_local),
                    ("w_gate_local", w_gate), ("w_up_local", w_up), ("w_down_local", w_down)):
        if t.device != x_local.device:
            raise ValueError(f"{name} is on {t.device} but x_local is on {x_local.device}")
    if topk_ids_local.shape[1] > num_experts:
        raise ValueError(f"top_k={topk_ids_local.shape[1]} exceeds num_experts={num_experts}")


def _rank_run_class(backend: str):
    """The per-rank layer-run class of ``backend`` (constructor and ``forward``/``backward`` as
    :class:`RankLayerRun`); RuntimeError if its module cannot be imported here.

    ``"triton"``: :class:`mok.triton_ref.pipeline.TritonRankRun`, whose kernels read the peer group's
    ``ptr_table`` (pull-dispatch, push-combine, pull reverse-combine, push reverse-dispatch). ``"cuda"``:
    :class:`mok.cuda.rank_run.CudaRankRun` (the megakernel's forward, the Triton backward). Each class lists the
    transports it takes in ``TRANSPORTS``.
    """
    if backend == "reference":
        return RankLayerRun
    if backend == "triton":
        try:
            from .triton_ref.pipeline import TritonRankRun
        except ImportError as err:
            raise RuntimeError(f"backend 'triton' is unavailable: {err}") from err
        return TritonRankRun
    if backend == "cuda":
        if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
            raise RuntimeError("backend 'cuda' needs a Hopper GPU (compute capability 9.x)")
        try:
            from .cuda.rank_run import CudaRankRun
            from .triton_ref.pipeline import TritonRankRun  # noqa: F401 (its backward)
        except ImportError as err:
            raise RuntimeError(f"backend 'cuda' is unavailable: {err}") from err
        return CudaRankRun
    raise ValueError(f"distributed backend must be one of {BACKENDS}, got {backend!r}")


def distributed_moe(x_local: torch.Tensor, topk_ids_local: torch.Tensor, topk_weights_local: torch.Tensor,
                    w_gate_local: torch.Tensor, w_up_local: torch.Tensor, w_down_local: torch.Tensor, *,
                    group=None, num_experts: int, backend: str = "reference", precision: str | None = None,
                    config: MoKConfig | None = None, transport: str | None = None,
                    peers: PeerGroup | None = None, check_inputs: bool = True) -> torch.Tensor:
    """The MoE layer with experts spread over the ranks of ``group`` (one process per rank).

    Args:
        x_local: ``[T_local, H]`` bf16/fp32, this rank's tokens (every rank holds the same ``T_local``).
        topk_ids_local: ``[T_local, K]`` int32/int64 global expert ids in ``[0, num_experts)``.
        topk_weights_local: ``[T_local, K]`` router weights (fp32).
        w_gate_local, w_up_local: ``[E_local, I, H]``; w_down_local: ``[E_local, H, I]``; rank r holds experts
            ``[r*E_local, (r+1)*E_local)``, ``E_local = num_experts / world``.
        group: the ``torch.distributed`` process group (``None``: the default group).
        num_experts: E, the global expert count.
        backend: ``"reference"``, ``"nccl"`` (all-to-all baseline), ``"triton"`` or ``"cuda"`` (the megakernel;
            bf16, tile 128).
        precision: ``None`` (x's dtype), ``"bf16"`` or ``"fp32"``.
        config: :class:`MoKConfig`; every rank must pass the same.
        transport: ``"collective"`` (all_to_all_single; any process group), ``"peers"`` (torch pulls and pushes
            through symmetric peer memory: :func:`default_peers` unless ``peers`` is given) or
            ``"peers-triton"`` (the Triton transfer kernels through the same memory). ``None``: the
            ``MOK_DIST_TRANSPORT`` environment variable, else ``"collective"`` (``"peers"`` for backend
            ``"triton"`` and ``"cuda"``).
        check_inputs: validate the gathered routing (reads it back to the host: synchronises).

    Returns ``[T_local, H]`` in x's dtype, differentiable with respect to x, the router weights and the local
    expert weights. For ``"reference"`` every bit equals the matching rows of the single-process
    ``mok.moe(..., backend="reference")`` on the gathered problem. Collective: every rank calls it (and its
    backward) in the same order.
    """
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    check_local_inputs(x_local, topk_ids_local, topk_weights_local, w_gate_local, w_up_local, w_down_local,
                       world=world, num_experts=num_experts)
    precision = resolve_precision(precision, x_local)
    if precision not in ("bf16", "fp32"):
        raise ValueError(f"distributed_moe supports precision 'bf16' and 'fp32', got {precision!r}")
    config = config or MoKConfig()
    if backend == "nccl":
        from .backends.nccl_baseline import nccl_moe
        return nccl_moe(x_local, topk_ids_local, topk_weights_local, w_gate_local, w_up_local, w_down_local,
                        group=group, num_experts=num_experts)
    run_class = _rank_run_class(backend)
    if transport is None:
        # "collective" where the backend takes it, else its own first ("peers": kernels that read peer memory)
        supported = run_class.TRANSPORTS
        transport = os.environ.get(TRANSPORT_ENV) or ("collective" if "collective" in supported else supported[0])
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
    if transport.startswith("peers") and peers is None:
        peers = default_peers(group, x_local.device)

    topk_ids = gather_routing(topk_ids_local, group)
    if check_inputs:
        check_routing_values(topk_ids, num_experts)  # on the gathered routing, so every rank raises alike

    def make_run(x, weights, w_gate, w_up, w_down):
        return run_class(x, topk_ids, weights.float(), w_gate, w_up, w_down, rank=rank, world=world,
                         num_experts=num_experts, config=config, transport=transport, group=group, peers=peers)

    return LayerRunFunction.apply(x_local, topk_weights_local, w_gate_local, w_up_local, w_down_local, make_run)


__all__ = ["BACKENDS", "TRANSPORTS", "CollectiveTransport", "ExchangeRows", "PeerTransport",
           "RankLayerRun", "TritonPeerTransport", "check_local_inputs", "default_peers",
           "distributed_moe", "exchange_rows", "gather_routing", "make_transport", "release_default_peers"]
