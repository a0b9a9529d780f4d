"""Triton reference kernels for every MoK stage, forward and backward (``mok.moe(..., backend="triton")``).

One module per stage, in data-flow order; each opens with what it reads and writes and why it is tiled so:

* :mod:`.pull_dispatch`  -- the expert side pulls the token rows (forward) and output gradients plus router
  weights (backward) that its schedule table names, from the source ranks' buffers, into the ring.
* :mod:`.grouped_gemm`   -- expert-grouped GEMMs over tile-padded segments: forward, dgrad, and the
  fixed-order weight gradient (bitwise independent of ring size and EP degree).
* :mod:`.swiglu`         -- SwiGLU fused into the gate/up GEMM epilogue; its backward and the router-weight
  gradient fused into the down projection's dgrad epilogue.
* :mod:`.push_combine`   -- pushes rows into the source ranks' (token, k) slots; fixed-order sums over k.
* :mod:`.pipeline`       -- composes them over emulated EP ranks and ring minibatches; registers the backend.

Routing: :mod:`.router_topk` (``mok.route``'s top-k selection on the GPU: equal logits to the lower expert id).

MXFP8 (``precision="mxfp8"``): :mod:`.mxfp8_quant` (quantize/dequantize kernels), :mod:`.mxfp8_gemm` (grouped GEMM
with on-chip dequantization), :mod:`.mxfp8_rows` (the packed FP8-plus-scales rows that dispatch moves, and the
layer's MXFP8 arithmetic in PyTorch for tests). Experiments: :mod:`.push_pull` (push vs pull row transfers).

Importing a submodule imports Triton; set ``TRITON_INTERPRET=1`` before that to run the kernels on CPU tensors.
"""
