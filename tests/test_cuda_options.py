"""The megakernel backend's options, checked without a GPU (mok/cuda/backend.py)."""

from __future__ import annotations

import pytest

from mok.cuda.backend import GATHER_MAX_COLUMN_BLOCKS, default_variant, resolve_dispatch


def test_auto_dispatch_gathers_only_for_few_gate_up_column_blocks(monkeypatch):
    monkeypatch.delenv("MOK_CUDA_DISPATCH", raising=False)
    assert resolve_dispatch(None, 128 * GATHER_MAX_COLUMN_BLOCKS) == "gather"
    assert resolve_dispatch("auto", 128 * GATHER_MAX_COLUMN_BLOCKS + 64) == "ring"  # one more (partial) block
    assert resolve_dispatch("ring", 64) == "ring" and resolve_dispatch("gather", 4096) == "gather"


def test_dispatch_environment_and_bad_values(monkeypatch):
    monkeypatch.setenv("MOK_CUDA_DISPATCH", "gather")
    assert resolve_dispatch(None, 4096) == "gather"
    with pytest.raises(ValueError, match="dispatch must be one of"):
        resolve_dispatch("push", 256)


def test_default_variant_is_pipelined_unless_overridden(monkeypatch):
    monkeypatch.delenv("MOK_CUDA_VARIANT", raising=False)
    assert default_variant() == "pipelined"
    monkeypatch.setenv("MOK_CUDA_VARIANT", "simple")
    assert default_variant() == "simple"


# The binding's last positional arguments, in order (csrc/binding.cpp, forward): a new trailing argument is added
# here once instead of shifting every test's index.
FORWARD_TAIL = ("store_warps", "combine_tokens", "combine_offsets", "skip_padding_half", "trace", "down_span",
                "overlap_steps", "y", "y_rows", "down_ping_pong", "first_dispatch_parts", "sum_kernel", "clusters",
                "spread_dispatch")
# ... and its first ones.
FORWARD_HEAD = ("src_rank", "src_slot", "tile_expert", "segment_offsets", "x_ptrs", "weight_ptrs", "combine_ptrs",
                "out_ptrs")


class _RecordingExtension:
    """Stands in for the compiled extension: keeps the arguments of the last forward() call."""

    def forward(self, *args):
        self.args = args

    def arg(self, name: str):
        """The argument ``name`` (FORWARD_HEAD or FORWARD_TAIL) of the last call."""
        if name in FORWARD_HEAD:
            return self.args[FORWARD_HEAD.index(name)]
        return self.args[len(self.args) - len(FORWARD_TAIL) + FORWARD_TAIL.index(name)]


def launched(prep, *names, **options):
    """The binding arguments ``names`` (FORWARD_HEAD or FORWARD_TAIL) that ``launch(prep, **options)`` passes, through
    the recording stand-in: one value for one name, else a tuple."""
    from mok.cuda.backend import launch
    ext = _RecordingExtension()
    launch(prep, extension=ext, **options)
    values = tuple(ext.arg(name) for name in names)
    return values[0] if len(values) == 1 else values


def test_early_combine_order_reaches_the_launch_only_when_asked(monkeypatch):
    """prepare() builds the early-combine order when asked; launch() passes it on per MOK_CUDA_EARLY_COMBINE
    (default off) or its own argument, and refuses early_combine=True without an order (top-1, fused)."""
    import torch

    import mok
    from mok.cuda.backend import launch, prepare

    gen = torch.Generator().manual_seed(3)
    tokens, hidden, inter, experts = 256, 64, 64, 8
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    weights = [torch.randn(experts, inter, hidden, generator=gen).to(torch.bfloat16) for _ in range(2)]
    w_down = torch.randn(experts, hidden, inter, generator=gen).to(torch.bfloat16)
    monkeypatch.delenv("MOK_CUDA_EARLY_COMBINE", raising=False)

    def passed_order(prep, **kw):
        tokens_arg, offsets_arg = launched(prep, "combine_tokens", "combine_offsets", **kw)
        assert (tokens_arg.numel() > 0) == (offsets_arg.numel() > 0)
        return tokens_arg.numel() > 0

    w, ids = mok.route(torch.randn(tokens, experts, generator=gen), 2)
    prep = prepare(x, ids, w, *weights, w_down, early_combine=True)
    assert prep.combine_tokens is not None and prep.combine_offsets is not None
    assert not passed_order(prep)  # the default: off
    assert passed_order(prep, early_combine=True)
    assert not passed_order(prep, early_combine=False)
    monkeypatch.setenv("MOK_CUDA_EARLY_COMBINE", "1")
    assert passed_order(prep)
    assert prepare(x, ids, w, *weights, w_down).combine_tokens is not None  # the environment builds it too
    monkeypatch.delenv("MOK_CUDA_EARLY_COMBINE")
    assert prepare(x, ids, w, *weights, w_down).combine_tokens is None

    w1, ids1 = mok.route(torch.randn(tokens, experts, generator=gen), 1)  # top-1: fused combine, no order
    top1 = prepare(x, ids1, w1, *weights, w_down, early_combine=True)
    assert top1.combine_tokens is None
    with pytest.raises(ValueError, match="early-combine order"):
        launch(top1, extension=_RecordingExtension(), early_combine=True)


def small_launch(*, seed: int, tokens: int, hidden: int, inter: int, experts: int, ep_size: int = 1, config=None,
                 top_k: int = 2):
    """prepare() of a random top-k layer (top-2 by default) on the CPU (the launch arguments are all these tests look
    at)."""
    import torch

    import mok
    from mok.cuda.backend import prepare

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    w_gate, w_up = (torch.randn(experts, inter, hidden, generator=gen).to(torch.bfloat16) for _ in range(2))
    w_down = torch.randn(experts, hidden, inter, generator=gen).to(torch.bfloat16)
    w, ids = mok.route(torch.randn(tokens, experts, generator=gen), top_k)
    return prepare(x, ids, w, w_gate, w_up, w_down, ep_size=ep_size, config=config)


def test_skip_padding_half_reaches_the_launch(monkeypatch):
    """launch() passes skip_padding_half before the trace, the down span and overlap_steps: on by default, off with
    MOK_CUDA_SKIP_PADDING_HALF=0, and its own argument wins over the environment."""

    prep = small_launch(seed=5, tokens=128, hidden=64, inter=64, experts=4)

    def passed(**kw):
        value = launched(prep, "skip_padding_half", **kw)
        assert isinstance(value, bool)
        return value

    monkeypatch.delenv("MOK_CUDA_SKIP_PADDING_HALF", raising=False)
    assert passed() is True
    monkeypatch.setenv("MOK_CUDA_SKIP_PADDING_HALF", "0")
    assert passed() is False
    assert passed(skip_padding_half=True) is True


def test_trace_reaches_the_launch_before_the_down_span():
    """launch() passes the task-timeline buffer (after skip_padding_half): an empty int64 tensor without one, the buffer itself
    with one; trace_buffer() sizes it for every task the launch can have (-1: not recorded)."""
    import torch

    from mok.cuda.backend import TRACE_FIELDS, launch, trace_buffer

    prep = small_launch(seed=6, tokens=256, hidden=512, inter=384, experts=8, ep_size=2)
    ext = _RecordingExtension()
    launch(prep, extension=ext)
    assert ext.arg("trace").dtype == torch.int64 and ext.arg("trace").numel() == 0
    trace = trace_buffer(prep)
    launch(prep, extension=ext, trace=trace)
    assert ext.arg("trace") is trace
    # 2 ranks x (capacity / 128) tiles x (1 dispatch + 3 gate/up + 2 down column blocks) + 2 x 8 combine blocks, and
    # up to 7 more dispatch tasks per tile of each rank's first minibatch (D(0) in at most 8 parts), and with clusters
    # up to one padding ticket per group of the order (5 per step and rank; one step more than the minibatches)
    tiles = prep.schedule.capacity // 128
    first = min(tiles, prep.minibatch_rows // 128)
    steps = -(-prep.schedule.capacity // prep.minibatch_rows) + 1
    assert trace.shape == (2 * tiles * 6 + 2 * 7 * first + 2 * 8 + 2 * 5 * steps, len(TRACE_FIELDS))
    assert bool((trace == -1).all())


def test_down_span_reaches_the_launch_and_turns_the_store_warps_off(monkeypatch):
    """launch() passes the down span: by default (``auto``) the widest divisor up to 8 of the column blocks of
    H in gather mode, in ring mode with down_tma the widest whose task runs at most 64 K blocks (span x I <= 4096),
    and 1 in ring mode with the push, else MOK_CUDA_DOWN_SPAN or its own argument; a span must divide the column
    blocks; a span above 1 turns the default store warps off and refuses them when asked for."""
    from mok.cuda.backend import resolve_down_span

    prep = small_launch(seed=7, tokens=256, hidden=1024, inter=128, experts=8)  # 4 column blocks of 256
    def passed(**kw):
        span, store_warps = launched(prep, "down_span", "store_warps", **kw)
        assert isinstance(span, int) and isinstance(store_warps, bool)
        return span, store_warps

    monkeypatch.delenv("MOK_CUDA_DOWN_SPAN", raising=False)
    monkeypatch.delenv("MOK_CUDA_STORE_WARPS", raising=False)
    assert passed(dispatch="ring", down_tma=False) == (1, True)
    assert passed(dispatch="ring", down_tma=True)[0] == 4  # I = 128: 2 K blocks per column block
    assert passed(dispatch="gather")[0] == 4
    monkeypatch.setenv("MOK_CUDA_DOWN_SPAN", "4")
    assert passed(dispatch="ring") == (4, False)
    assert passed(dispatch="ring", down_span=2) == (2, False)
    assert passed(dispatch="ring", down_span=1, down_tma=False) == (1, True)
    with pytest.raises(ValueError, match="down_span"):
        passed(down_span=3)
    with pytest.raises(ValueError, match="store_warps"):
        passed(dispatch="ring", down_span=2, store_warps=True)
    monkeypatch.setenv("MOK_CUDA_DOWN_SPAN", "two")
    with pytest.raises(ValueError, match="MOK_CUDA_DOWN_SPAN"):
        passed()
    monkeypatch.delenv("MOK_CUDA_DOWN_SPAN")
    # auto in gather mode: the widest divisor of the column blocks up to 8 (16 blocks, anchor-2 -> 8; 6, anchor-1
    # -> 6; 5 -> 5; 28 -> 7; 11 -> 1); ring mode always 1.
    assert [resolve_down_span(None, "gather", h) for h in (4096, 1536, 1280, 256, 320, 7168, 2816)] == [8, 6, 5, 1, 2,
                                                                                                    7, 1]
    assert [resolve_down_span(None, "ring", h) for h in (4096, 1536)] == [1, 1]
    # ring mode with down_tma: span x I <= 4096 (anchor-3, I = 1,024: 4; anchors 4-5, I = 2,048: 2; I = 3,072: 1),
    # a divisor of the column blocks, at most 8.
    assert [resolve_down_span(None, "ring", h, i, True) for h, i in
            ((4096, 1024), (4096, 2048), (7168, 2048), (7168, 3072), (4096, 256), (1536, 1024))] == [4, 2, 2, 1, 8, 3]
    assert resolve_down_span("auto", "gather", 7168) == 7 and resolve_down_span(2, "gather", 7168) == 2


def test_first_dispatch_parts_reach_the_launch(monkeypatch):
    """launch() passes the first minibatch's dispatch tasks per tile last: 0 (auto: the launch gives every CTA one) by
    default, else MOK_CUDA_FIRST_DISPATCH_PARTS or its own argument, 1..8; anything else is refused."""
    from mok.cuda.backend import resolve_first_dispatch_parts

    prep = small_launch(seed=9, tokens=256, hidden=256, inter=128, experts=8)

    def passed(**kw):
        value = launched(prep, "first_dispatch_parts", **kw)
        assert isinstance(value, int)
        return value

    monkeypatch.delenv("MOK_CUDA_FIRST_DISPATCH_PARTS", raising=False)
    assert passed() == 0
    monkeypatch.setenv("MOK_CUDA_FIRST_DISPATCH_PARTS", "4")
    assert passed() == 4 and passed(first_dispatch_parts=1) == 1
    monkeypatch.setenv("MOK_CUDA_FIRST_DISPATCH_PARTS", "auto")
    assert passed() == 0
    for bad in ("9", "-1", "many"):
        monkeypatch.setenv("MOK_CUDA_FIRST_DISPATCH_PARTS", bad)
        with pytest.raises(ValueError, match="MOK_CUDA_FIRST_DISPATCH_PARTS|first_dispatch_parts"):
            passed()
    with pytest.raises(ValueError, match="first_dispatch_parts"):
        resolve_first_dispatch_parts(9)
    assert [resolve_first_dispatch_parts(v) for v in (0, 1, 8, "3", "auto")] == [0, 1, 8, 3, 0]


def test_overlap_steps_reach_the_launch_where_the_ring_allows_them(monkeypatch):
    """launch() passes overlap_steps: off by default, on with MOK_CUDA_OVERLAP_STEPS=1 where the ring holds 2
    or more minibatches (or all of them) and early combine is off, else the plain order; asked for where not
    allowed, a ValueError."""
    from mok.config import MoKConfig
    from mok.cuda.backend import overlap_steps_allowed, resolve_overlap_steps

    def passed(prep, **kw):
        value = launched(prep, "overlap_steps", **kw)
        assert isinstance(value, bool)
        return value

    two = small_launch(seed=8, tokens=256, hidden=256, inter=128, experts=8,
                       config=MoKConfig(minibatch_rows=128, ring_rows=256))
    one = small_launch(seed=8, tokens=256, hidden=256, inter=128, experts=8,
                       config=MoKConfig(minibatch_rows=128, ring_rows=128))
    monkeypatch.delenv("MOK_CUDA_OVERLAP_STEPS", raising=False)
    assert passed(two) is False and passed(two, overlap_steps=True) is True
    monkeypatch.setenv("MOK_CUDA_OVERLAP_STEPS", "1")
    assert passed(two) is True and passed(one) is False and passed(two, overlap_steps=False) is False
    with pytest.raises(ValueError, match="overlap_steps"):
        passed(one, overlap_steps=True)
    # ring slots >= 2, or >= every minibatch (1 of 1: nothing is overwritten); never with early combine
    assert overlap_steps_allowed(256, 128, 1024, False) and overlap_steps_allowed(128, 128, 128, False)
    assert not overlap_steps_allowed(128, 128, 1024, False) and not overlap_steps_allowed(512, 128, 1024, True)
    assert resolve_overlap_steps(None, False) is False


def test_down_ping_pong_reaches_the_launch_where_it_can_run(monkeypatch):
    """launch() passes down_ping_pong: by default on where down_ping_pong_allowed says so (down_tma, the pipelined
    variant without the signal warp, I <= 256), off with MOK_CUDA_DOWN_PING_PONG=0 or its own argument; asked for
    where it cannot run, a ValueError (the kernel's launch refuses it too, instead of deadlocking at I > 256)."""
    from mok.cuda.backend import down_ping_pong_allowed

    def passed(prep, **kw):
        value = launched(prep, "down_ping_pong", **kw)
        assert isinstance(value, bool)
        return value

    prep = small_launch(seed=9, tokens=256, hidden=256, inter=128, experts=8)
    wide = small_launch(seed=9, tokens=256, hidden=256, inter=512, experts=8)
    for name in ("MOK_CUDA_DOWN_PING_PONG", "MOK_CUDA_DOWN_TMA", "MOK_CUDA_SIGNAL_WARP", "MOK_CUDA_VARIANT"):
        monkeypatch.delenv(name, raising=False)
    gather = {"dispatch": "gather", "down_tma": True}
    assert passed(prep, **gather) is True and passed(prep, down_ping_pong=False, **gather) is False
    assert passed(prep, dispatch="gather", down_tma=False) is False  # the push: nothing to take turns on
    assert passed(prep, variant="simple", **gather) is False
    assert passed(prep, dispatch="ring", down_tma=True) is False  # the signal warp (on by default)
    assert passed(prep, dispatch="ring", down_tma=True, signal_warp=False) is True
    assert passed(wide, **gather) is False  # I = 512: a turn would need more stages than the ring has
    for bad in ({"dispatch": "gather", "down_tma": False}, {"dispatch": "ring", "down_tma": True}):
        with pytest.raises(ValueError, match="down_ping_pong"):
            passed(prep, down_ping_pong=True, **bad)
    with pytest.raises(ValueError, match="down_ping_pong"):
        passed(wide, down_ping_pong=True, **gather)
    monkeypatch.setenv("MOK_CUDA_DOWN_PING_PONG", "0")
    assert passed(prep, **gather) is False and passed(prep, down_ping_pong=True, **gather) is True
    assert down_ping_pong_allowed(True, "pipelined", False, 256) and not down_ping_pong_allowed(True, "pipelined",
                                                                                               False, 320)


def test_clusters_reach_the_launch_where_they_can_run(monkeypatch):
    """launch() passes clusters: off by default, on with MOK_CUDA_CLUSTERS=1 where clusters_allowed says so (the
    pipelined variant in ring mode with the signal warp, without overlap_steps or the ping-pong down task) and off
    elsewhere; clusters=True where they cannot run is a ValueError."""
    from mok.config import MoKConfig
    from mok.cuda.backend import clusters_allowed

    def passed(prep, **kw):
        value = launched(prep, "clusters", **kw)
        assert isinstance(value, bool)
        return value

    prep = small_launch(seed=11, tokens=256, hidden=256, inter=512, experts=8)
    two = small_launch(seed=11, tokens=256, hidden=256, inter=512, experts=8,
                       config=MoKConfig(minibatch_rows=128, ring_rows=256))
    for name in ("MOK_CUDA_CLUSTERS", "MOK_CUDA_SIGNAL_WARP", "MOK_CUDA_VARIANT", "MOK_CUDA_OVERLAP_STEPS",
                 "MOK_CUDA_DOWN_PING_PONG", "MOK_CUDA_DOWN_TMA"):
        monkeypatch.delenv(name, raising=False)
    ring = {"variant": "pipelined", "dispatch": "ring"}
    assert passed(prep, **ring) is False and passed(prep, clusters=True, **ring) is True
    monkeypatch.setenv("MOK_CUDA_CLUSTERS", "1")
    assert passed(prep, **ring) is True and passed(prep, clusters=False, **ring) is False
    for elsewhere in ({"variant": "simple", "dispatch": "ring"}, {"variant": "pipelined", "dispatch": "gather"},
                      {**ring, "signal_warp": False}):
        assert passed(prep, **elsewhere) is False, elsewhere
        with pytest.raises(ValueError, match="clusters=True"):
            passed(prep, clusters=True, **elsewhere)
    assert passed(two, overlap_steps=True, **ring) is False
    with pytest.raises(ValueError, match="clusters=True"):
        passed(two, overlap_steps=True, clusters=True, **ring)
    assert clusters_allowed("pipelined", "ring", True, False, False)
    assert not clusters_allowed("pipelined", "ring", True, False, True)  # the ping-pong down task


def test_spread_dispatch_reaches_the_launch_where_the_ring_allows_it(monkeypatch):
    """launch() passes spread_dispatch: off by default, on with MOK_CUDA_SPREAD_DISPATCH=1 in ring mode where the ring
    holds 2 minibatches (or the whole schedule) and steps are not overlapped, off elsewhere (gather mode, a ring of one
    minibatch of several); spread_dispatch=True where it cannot run is a ValueError."""
    from mok.config import MoKConfig
    from mok.cuda.backend import spread_dispatch_allowed

    def passed(prep, **kw):
        value = launched(prep, "spread_dispatch", **kw)
        assert isinstance(value, bool)
        return value

    for name in ("MOK_CUDA_SPREAD_DISPATCH", "MOK_CUDA_OVERLAP_STEPS", "MOK_CUDA_DISPATCH"):
        monkeypatch.delenv(name, raising=False)
    two = small_launch(seed=11, tokens=256, hidden=256, inter=512, experts=8,
                       config=MoKConfig(minibatch_rows=128, ring_rows=256))
    one = small_launch(seed=11, tokens=256, hidden=256, inter=512, experts=8,
                       config=MoKConfig(minibatch_rows=128, ring_rows=128))
    ring, gather = {"dispatch": "ring"}, {"dispatch": "gather"}
    assert passed(two, **ring) is False and passed(two, spread_dispatch=True, **ring) is True
    monkeypatch.setenv("MOK_CUDA_SPREAD_DISPATCH", "1")
    assert passed(two, **ring) is True and passed(two, spread_dispatch=False, **ring) is False
    assert passed(one, **ring) is False and passed(two, **gather) is False
    assert passed(two, overlap_steps=True, **ring) is False
    for prep, kw in ((one, ring), (two, gather), (two, {**ring, "overlap_steps": True})):
        with pytest.raises(ValueError, match="spread_dispatch=True"):
            passed(prep, spread_dispatch=True, **kw)
    assert spread_dispatch_allowed("ring", 256, 128, 1024, False)
    assert spread_dispatch_allowed("ring", 128, 128, 128, False)  # the whole schedule: no next minibatch
    assert not spread_dispatch_allowed("ring", 128, 128, 1024, False)
    assert not spread_dispatch_allowed("gather", 256, 128, 1024, False)
    assert not spread_dispatch_allowed("ring", 256, 128, 1024, True)


def test_down_tma_reaches_the_launch_with_the_inverse_map(monkeypatch):
    """launch() passes y and y_rows: with down_tma (the default in gather mode, MOK_CUDA_DOWN_TMA=auto; =1 in ring
    mode too; the argument) the workspace's y buffer [R * capacity, H] and its inverse-map buffer (the kernel fills
    it; y_rows_table, checked here, is its reference: every (source rank, token * K + k) to the schedule row that
    holds it), and the output table for the combine slots (never dereferenced then; no slots are made); else two
    empty tensors and the workspace's slots. Refused for a top-1 layer (fused combine); a bad MOK_CUDA_DOWN_TMA is
    an error."""
    import torch

    import mok
    from mok.cuda import backend
    from mok.cuda.backend import prepare, y_rows_table

    def passed(prep, **kw):
        return launched(prep, "y", "y_rows", "combine_ptrs", **kw)

    prep = small_launch(seed=9, tokens=256, hidden=256, inter=128, experts=8, ep_size=2)
    monkeypatch.delenv("MOK_CUDA_DOWN_TMA", raising=False)
    y, y_rows, table = passed(prep, dispatch="ring")
    assert y.numel() == 0 and y_rows.numel() == 0
    assert table is prep.workspace.combine_slot_table()
    assert prep.workspace.y is None
    # auto: on in gather mode where y is not much larger than the slots. Here (2 ranks, the worst-case capacity) y is
    # twice the slots, so auto keeps the push; the rule itself is checked below.
    assert passed(prep, dispatch="gather")[0].numel() == 0
    monkeypatch.setattr(backend, "down_tma_y_fits", lambda *sizes: True)
    y, y_rows, table = passed(prep, dispatch="gather")
    s = prep.schedule
    ranks, capacity = s.src_rank.shape
    assert y.shape == (ranks * capacity, 256) and y.dtype == torch.bfloat16 and y is prep.workspace.y
    assert y_rows is prep.workspace.y_rows and y_rows.shape == (ranks, s.tokens_per_rank * s.top_k)
    assert table is prep.out_ptrs
    assert passed(prep, dispatch="gather", down_tma=False)[0].numel() == 0
    assert passed(prep, dispatch="ring", down_tma=True)[1] is y_rows
    monkeypatch.setenv("MOK_CUDA_DOWN_TMA", "1")
    assert passed(prep, dispatch="ring")[1] is y_rows
    monkeypatch.setenv("MOK_CUDA_DOWN_TMA", "0")
    assert passed(prep, dispatch="gather")[0].numel() == 0
    monkeypatch.setenv("MOK_CUDA_DOWN_TMA", "yes")
    with pytest.raises(ValueError, match="MOK_CUDA_DOWN_TMA"):
        passed(prep)
    monkeypatch.delenv("MOK_CUDA_DOWN_TMA")
    # Ring mode with down_tma runs without the store warps: asking for them is an error.
    with pytest.raises(ValueError, match="store_warps=True"):
        passed(prep, dispatch="ring", down_tma=True, store_warps=True)
    assert passed(prep, dispatch="ring", down_tma=True, signal_warp=True)[1] is y_rows
    # The inverse map, checked against the tables row by row.
    inverse = y_rows_table(s)
    for r in range(ranks):
        for i in range(capacity):
            src, slot = int(s.src_rank[r, i]), int(s.src_slot[r, i])
            if src >= 0:
                assert int(inverse[src, slot]) == r * capacity + i
    assert bool((inverse >= 0).all()), "every (token, k) has a row"
    # A row that names no slot (an inconsistent schedule) is dropped, not an index past the table (on a GPU, a
    # device-side assert that ends the process's CUDA context); its (token, k) keeps -1, which the kernel reports.
    from types import SimpleNamespace
    bad = SimpleNamespace(src_rank=s.src_rank.clone(), src_slot=s.src_slot.clone(), tokens_per_rank=s.tokens_per_rank,
                          top_k=s.top_k)
    lost = (int(bad.src_rank[0, 0]), int(bad.src_slot[0, 0]))
    assert lost[0] >= 0, "row 0 of rank 0 is a token row"
    bad.src_slot[0, 0] = 10 ** 6
    bad.src_rank[0, 1] = ranks  # a rank outside [0, R)
    lost_too = (int(s.src_rank[0, 1]), int(s.src_slot[0, 1]))
    damaged = y_rows_table(bad)
    assert int(damaged[lost]) == -1 and int(damaged[lost_too]) == -1
    damaged[lost], damaged[lost_too] = inverse[lost], inverse[lost_too]
    assert torch.equal(damaged, inverse)
    # top-1: fused combine, nothing for y
    gen = torch.Generator().manual_seed(10)
    x = torch.randn(128, 64, generator=gen).to(torch.bfloat16)
    w_gate, w_up = (torch.randn(4, 64, 64, generator=gen).to(torch.bfloat16) for _ in range(2))
    w_down = torch.randn(4, 64, 64, generator=gen).to(torch.bfloat16)
    w, ids = mok.route(torch.randn(128, 4, generator=gen), 1)
    top1 = prepare(x, ids, w, w_gate, w_up, w_down)
    assert passed(top1, dispatch="gather")[0].numel() == 0  # auto asks, the fused layer cannot: the push
    with pytest.raises(ValueError, match="down_tma"):
        passed(top1, down_tma=True)


def test_down_tma_auto_needs_y_close_to_the_slots_size():
    """auto takes down_tma (in either dispatch mode, since round 34) only where y (R * capacity rows) is at most
    DOWN_TMA_MAX_Y_RATIO times the slots (R * T_local * K rows): anchor-2 at EP 1 (556,800 rows for 524,288 slots,
    its capacity on random routing) fits, the worst-case capacity at EP 8 (8 times the slots) does not; the switch
    set to 1 ignores the size."""
    from mok.cuda.backend import DOWN_TMA_MAX_Y_RATIO, down_tma_y_fits, resolve_down_tma
    assert 1.0 < DOWN_TMA_MAX_Y_RATIO < 2.0
    assert down_tma_y_fits(556_800, 1, 32_768, 16)
    assert not down_tma_y_fits(556_800, 8, 32_768 // 8, 16)
    assert resolve_down_tma(None, True, "gather", True) and not resolve_down_tma(None, True, "gather", False)
    assert resolve_down_tma(None, True, "ring", True) and not resolve_down_tma(None, True, "ring", False)
    assert resolve_down_tma(True, True, "ring", False)


def test_down_tma_buffers_are_not_made_inside_a_graph_capture(monkeypatch):
    """The first launch of a mode makes its buffers (y and y_rows, or the combine slots); inside a CUDA graph capture
    that would record their fills into the graph and leave the slots' pointer table unwritten until a replay, so
    it is refused with a clear error; once made, capturing is fine."""
    from mok.cuda import backend
    from mok.cuda.workspace import release_workspaces
    release_workspaces()  # a cached workspace of these sizes would already hold the buffers
    prep = small_launch(seed=12, tokens=128, hidden=128, inter=64, experts=4)
    monkeypatch.setattr(backend, "_capturing", lambda: True)
    ext = _RecordingExtension()
    with pytest.raises(RuntimeError, match="run one eagerly"):
        backend.launch(prep, extension=ext, dispatch="gather", down_tma=True)
    with pytest.raises(RuntimeError, match="run one eagerly"):
        backend.launch(prep, extension=ext, dispatch="ring", down_tma=False)
    monkeypatch.setattr(backend, "_capturing", lambda: False)
    backend.launch(prep, extension=ext, dispatch="gather", down_tma=True)
    backend.launch(prep, extension=ext, dispatch="ring", down_tma=False)
    monkeypatch.setattr(backend, "_capturing", lambda: True)
    backend.launch(prep, extension=ext, dispatch="gather", down_tma=True)
    backend.launch(prep, extension=ext, dispatch="ring", down_tma=False)


def test_a_launch_prepared_inside_a_capture_gets_a_workspace_of_its_own(monkeypatch):
    """prepare() inside a capture (a layer call under make_graphed_callables, which warms up on another stream than
    it captures on) takes a private workspace made in the capture, never the cache: its launches make their buffers
    there, unfilled (a fill would rerun on every replay), in either mode."""
    import torch

    from mok.cuda import backend
    from mok.cuda.workspace import cached_workspaces, release_workspaces
    release_workspaces()
    monkeypatch.setattr(backend, "_capturing", lambda: True)
    full, fills = torch.full, []
    monkeypatch.setattr(torch, "full",
                        lambda *args, **kwargs: fills.append(kwargs.get("dtype")) or full(*args, **kwargs))
    for dispatch, down_tma in (("gather", True), ("ring", False)):
        prep = small_launch(seed=13, tokens=128, hidden=128, inter=64, experts=4)
        ws = prep.workspace
        assert ws.in_capture and ws not in cached_workspaces()
        launched(prep, "y", dispatch=dispatch, down_tma=down_tma)  # no "run one eagerly" error
        made = ws.y if down_tma else ws.combine
        assert made is not None and made.shape[-1] == 128  # (H)
    assert torch.bfloat16 not in fills  # y and the slots unfilled (y_rows' int32 -1 fill is tiny and kept)
    monkeypatch.setattr(torch, "full", full)
    monkeypatch.setattr(backend, "_capturing", lambda: False)
    prep = small_launch(seed=13, tokens=128, hidden=128, inter=64, experts=4)
    assert not prep.workspace.in_capture
    assert bool(prep.workspace.y_buffer().isnan().all())  # (outside a capture: NaN, so unwritten rows show)


def test_padding_half_tiles_counts_the_tiles_whose_second_half_is_padding():
    """KernelSchedule.padding_half_tiles (what the GPU test and the probe count): on routing built so that every
    expert gets 275 rows (3 tiles, the last with 19 rows), one per expert at every EP degree; on random routing,
    the segments whose real rows end 1..64 rows into a tile, from build_schedule's segment counts."""
    import torch

    import mok
    from mok.cuda.schedule_tables import build_kernel_schedule

    tokens, experts = 1100, 8
    token = torch.arange(tokens)
    ids = torch.stack([token % experts, (token + 1) % experts], dim=1)
    for ep_size in (1, 2, 4):
        assert build_kernel_schedule(ids, experts, ep_size).padding_half_tiles() == (3 * experts, experts)

    gen = torch.Generator().manual_seed(11)
    _, ids = mok.route(torch.randn(1024, 16, generator=gen), 4)
    for ep_size in (1, 2, 4):
        schedule = build_kernel_schedule(ids, 16, ep_size)
        counts = schedule.full_schedule().segment_counts.flatten().tolist()
        expected_tiles = sum((c + 127) // 128 for c in counts)
        expected_halves = sum(1 for c in counts if 1 <= c % 128 <= 64)
        assert schedule.padding_half_tiles() == (expected_tiles, expected_halves)


def test_error_reports_name_every_counter_of_the_kernel():
    """mok.cuda.errors.COUNTER_NAMES has an entry for each CounterId of include/mok/workspace.cuh (a new wait
    would otherwise be reported by number only)."""
    import re
    from pathlib import Path

    from mok.cuda import errors

    header = (Path(errors.__file__).parent / "include/mok/workspace.cuh").read_text()
    enum = header.split("enum CounterId", 1)[1].split("};", 1)[0]
    ids = sorted(int(v) for v in re.findall(r"kCtr\w+ = (\d+)", enum))
    assert ids and ids == sorted(errors.COUNTER_NAMES)


def test_sort_by_expert_is_the_stable_sort():
    """The schedule's sort of expert ids (16-bit keys where E fits them, else 32-bit) gives torch.sort(ids,
    stable=True)'s values, as int32, and order."""
    import torch

    from mok.cuda.schedule_tables import sort_by_expert

    ids = torch.randint(0, 40000, (5000,), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    for experts in (6, 256, 40000):  # the last needs 32-bit keys
        values, order = sort_by_expert(ids % experts, experts)
        want = torch.sort(ids % experts, stable=True)
        assert values.dtype == torch.int32 and torch.equal(values, want.values) and torch.equal(order, want.indices)


def test_schedule_sort_choice(monkeypatch):
    """sort_by_expert: MOK_CUDA_SCHEDULE_SORT=torch is torch.sort's stable order on 16-bit keys, widened back to int32;
    an unknown choice, or the counting sort past its limits, is refused before anything runs; the method argument
    overrides the variable."""
    import torch

    from mok.cuda.schedule_tables import EXPERT_SORT_MAX_SLOTS, sort_by_expert

    ids = torch.randint(0, 6, (1000,), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    monkeypatch.setenv("MOK_CUDA_SCHEDULE_SORT", "torch")
    values, order = sort_by_expert(ids, 6)
    want = torch.sort(ids, stable=True)
    assert values.dtype == torch.int32 and torch.equal(values, want.values) and torch.equal(order, want.indices)
    monkeypatch.setenv("MOK_CUDA_SCHEDULE_SORT", "radix")
    with pytest.raises(ValueError, match="MOK_CUDA_SCHEDULE_SORT"):
        sort_by_expert(ids, 6)
    monkeypatch.setenv("MOK_CUDA_SCHEDULE_SORT", "counting")
    with pytest.raises(ValueError, match="'counting' sorts a 1-D CUDA tensor of 1 to"):
        sort_by_expert(torch.zeros(EXPERT_SORT_MAX_SLOTS + 1, dtype=torch.int32), 6)
    with pytest.raises(ValueError, match="'counting' sorts a 1-D CUDA tensor of 1 to"):  # a CPU tensor: a CUDA kernel
        sort_by_expert(ids, 6)
    values, order = sort_by_expert(ids, 6, method="torch")  # the argument over the variable
    assert torch.equal(values, want.values) and torch.equal(order, want.indices)
    with pytest.raises(ValueError, match="'auto', 'torch' or 'counting', got 'radix'"):
        sort_by_expert(ids, 6, method="radix")
    monkeypatch.setenv("MOK_CUDA_SCHEDULE_SORT", "auto")  # on a CPU tensor: torch.sort
    values, order = sort_by_expert(ids, 6)
    assert torch.equal(values, want.values) and torch.equal(order, want.indices)


def test_schedule_sort_limits_are_the_kernels():
    """EXPERT_SORT_MAX_SLOTS and EXPERT_SORT_MAX_EXPERTS are the counting sort's own limits (include/mok/launch.cuh)."""
    import re
    from pathlib import Path

    from mok.cuda import schedule_tables

    header = (Path(schedule_tables.__file__).parent / "include/mok/launch.cuh").read_text()
    limits = {name: int(v) for name, v in re.findall(r"constexpr int (kExpertSort\w+) = (\d+);", header)}
    assert limits == {"kExpertSortMaxSlots": schedule_tables.EXPERT_SORT_MAX_SLOTS,
                      "kExpertSortMaxExperts": schedule_tables.EXPERT_SORT_MAX_EXPERTS,
                      "kExpertSortSlotsPerCta": schedule_tables.EXPERT_SORT_SLOTS_PER_CTA}


def test_auto_takes_the_counting_sort_where_it_was_measured():
    """auto's range: every shape of the bench (the largest, anchor-2, at the bound), not the kernels' untimed corner,
    where every CTA would read 16 times anchor-2's CTA counts; the kernels' limits stay what 'counting' accepts."""
    import sys
    from pathlib import Path

    from mok.cuda.schedule_tables import counting_sort_fits, counting_sort_measured

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
    from cuda_breakdown import SHAPES

    for shape in SHAPES.values():
        slots = shape.tokens * shape.top_k
        assert counting_sort_fits(slots, shape.num_experts) and counting_sort_measured(slots, shape.num_experts), shape
    assert counting_sort_measured(524288, 256) and not counting_sort_measured(524288 + 4096, 256)
    assert counting_sort_fits(1 << 20, 1024) and not counting_sort_measured(1 << 20, 1024)
    assert not counting_sort_fits((1 << 20) + 1, 6) and not counting_sort_fits(8, 1025) and not counting_sort_fits(0, 6)


def test_sum_kernel_reaches_the_launch_where_allowed(monkeypatch):
    """launch() passes sum_kernel: by default (MOK_CUDA_SUM_KERNEL unset or auto) with down_tma only, =1 wherever
    sum_kernel_allowed says so (emulated ranks, top-k > 1, no early combine), =0 never, and the argument wins; =1
    leaves a top-1 layer alone, the argument True there is an error, and so is a bad MOK_CUDA_SUM_KERNEL."""
    from mok.cuda.backend import sum_kernel_allowed

    def passed(prep, **kw):
        return launched(prep, "sum_kernel", **kw)

    prep = small_launch(seed=11, tokens=256, hidden=256, inter=128, experts=8, ep_size=2)
    for unset in (True, False):
        if unset:
            monkeypatch.delenv("MOK_CUDA_SUM_KERNEL", raising=False)
        else:
            monkeypatch.setenv("MOK_CUDA_SUM_KERNEL", "auto")
        assert passed(prep, dispatch="ring", down_tma=False) is False
        assert passed(prep, dispatch="ring", down_tma=True) is True
        assert passed(prep, dispatch="gather", down_tma=True) is True
        assert passed(prep, dispatch="ring", down_tma=True, sum_kernel=False) is False
        assert passed(prep, dispatch="ring", down_tma=False, sum_kernel=True) is True
    monkeypatch.setenv("MOK_CUDA_SUM_KERNEL", "1")
    assert passed(prep, dispatch="ring", down_tma=False) is True
    assert passed(prep, dispatch="ring", down_tma=False, sum_kernel=False) is False
    monkeypatch.setenv("MOK_CUDA_SUM_KERNEL", "0")
    assert passed(prep, dispatch="gather", down_tma=True) is False
    assert sum_kernel_allowed(prep, early_combine=False) and not sum_kernel_allowed(prep, early_combine=True)
    top1 = small_launch(seed=12, tokens=256, hidden=256, inter=128, experts=8, ep_size=2, top_k=1)
    monkeypatch.setenv("MOK_CUDA_SUM_KERNEL", "1")
    assert passed(top1) is False
    with pytest.raises(ValueError, match="sum_kernel=True"):
        passed(top1, sum_kernel=True)
    monkeypatch.setenv("MOK_CUDA_SUM_KERNEL", "yes")
    with pytest.raises(ValueError, match="MOK_CUDA_SUM_KERNEL"):
        passed(prep)


def test_ring_mode_takes_down_tma_only_with_the_sum_kernel_and_without_asked_for_store_warps(monkeypatch):
    """Ring mode's auto down_tma comes with the sum kernel (its combine tasks through y measured slower than the push,
    round 20): not where the sum kernel is off (MOK_CUDA_SUM_KERNEL=0, sum_kernel=False, top-k above its table), and
    not where the store warps are asked for (they work for the push), which before round 34 was a valid call and
    stays one. Gather mode keeps down_tma either way."""
    from mok.cuda import backend
    from mok.cuda.backend import resolve_down_path

    monkeypatch.setattr(backend, "down_tma_y_fits", lambda *sizes: True)
    monkeypatch.delenv("MOK_CUDA_DOWN_TMA", raising=False)
    monkeypatch.delenv("MOK_CUDA_SUM_KERNEL", raising=False)
    prep = small_launch(seed=13, tokens=256, hidden=1024, inter=128, experts=8)
    assert resolve_down_path(prep, "ring") == (True, 4, True)
    assert resolve_down_path(prep, "ring", sum_kernel=False) == (False, 1, False)
    assert resolve_down_path(prep, "gather", sum_kernel=False)[:2] == (True, 4)
    assert resolve_down_path(prep, "ring", store_warps=True) == (False, 1, False)
    assert launched(prep, "store_warps", "y", dispatch="ring", store_warps=True)[0] is True
    monkeypatch.setenv("MOK_CUDA_SUM_KERNEL", "0")
    assert resolve_down_path(prep, "ring") == (False, 1, False)
    assert resolve_down_path(prep, "gather") == (True, 4, False)
    with pytest.raises(ValueError, match="intermediate"):
        backend.resolve_down_span(None, "ring", 1024, 0, True)
