"""Benchmarks and experiment tooling.

* :mod:`mok.bench.harness`: timing (CUDA events, median, rotated inputs), FLOP/byte accounting, result
  metadata, JSON / markdown / PNG writers.
* :mod:`mok.bench.problems`: a layer shape's inputs for the mok backends.
* :mod:`mok.bench.baselines`: SonicMoE beside mok (the PyTorch baseline is mok's backend ``"torch"``).
* :mod:`mok.bench.cli`: ``python -m mok bench`` / ``python -m mok.bench``.
* :mod:`mok.bench.studies`: the measurements behind the notebooks (push vs pull, minibatch sweep, SM waves),
  saved to and read back from ``experiments/results``.
* :mod:`mok.bench.notebook_runner`: runs the notebooks top to bottom (nbclient, or in-process where it is absent).
"""

from .harness import Timing, collect_metadata, layer_bytes, layer_flops, layer_traffic, time_fn

__all__ = ["Timing", "collect_metadata", "layer_bytes", "layer_flops", "layer_traffic", "time_fn"]
