"""EXPERIMENT: the bench's training step (forward and backward, router inside) captured in one CUDA graph, against
the same step run eagerly: what the host costs where the layer is small.

Round 26 found the qwen slice's ``cuda`` backward host-bound (4.14 ms of host time for 2.25 ms of kernels, with the
router and routing inside; ``profile_backward.py --router``). A CUDA graph replays the step's kernels without the
host; its time is the GPU's. For each shape and backend this script

1. runs the step (:meth:`mok.bench.problems.LayerProblem.forward_backward` on input set 0) eagerly on a side stream
   a few times (warm-up: buffers, pointer tables, compiled kernels made outside the capture),
2. captures one step in a ``torch.cuda.CUDAGraph`` (or prints why the capture failed: a host synchronisation, or
   a buffer made inside the capture, is a finding too),
3. replays it and compares the gradients with the eager step's bit for bit (the same inputs, the same routing),
   then writes input set 1 (other x, so other routing, and other output gradients and weights where the problem
   rotates them) into the captured step's tensors, replays again and compares with the eager step on set 1,
4. times eager steps and replays in rotation (:func:`mok.bench.harness.time_rotated`: CUDA events around each
   call, the host free to run ahead) and prints both medians, their ratio, and TFLOP/s,
5. and times each in steady state, as a training loop runs: ``--steps`` steps back to back from an idle GPU, wall
   time over steps (:func:`steady_ms`). Where the host needs longer for a step than the GPU, the events of step 4
   can still read the GPU's time (a queue built up by the other side's calls); this one cannot.

    python3 experiments/graph_step.py qwen3.5-397b/ep64 kimi-k2.7/ep64 [--backends cuda,torch] [--rounds 4]
    python3 experiments/graph_step.py 2048:1024:512:16:4    # a custom T:H:I:E:K shape

The timed replays reuse one input set. In training the inputs change every step (new x, so new routing); the
second comparison shows that a replay follows them: nothing on the host depends on the routing. Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "experiments"))


def capture_step(problem, backend: str, warmup: int = 3):
    """``(graph, eager_grads, graph_grads)``: the step warmed up and captured; ``graph_grads`` are the captured
    step's output tensors, refreshed by each replay."""
    import torch  # noqa: PLC0415

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            eager = problem.forward_backward(backend, 0)
    torch.cuda.current_stream().wait_stream(stream)
    eager = [g.detach().clone() if g is not None else None for g in eager]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = problem.forward_backward(backend, 0)
    return graph, eager, captured


def load_set(problem, source: int, target: int = 0) -> None:
    """Copy input set ``source`` into set ``target``'s tensors (x, the output gradient, the weights where they
    rotate), in place: the addresses a captured step reads."""
    import torch  # noqa: PLC0415

    with torch.no_grad():
        problem.xs[target].copy_(problem.xs[source])
        problem.grads[target].copy_(problem.grads[source])
        if len(problem.weights) > 1:
            for dst, src in zip(problem.weights[target], problem.weights[source]):
                dst.copy_(src)


def steady_ms(fn, steps: int, repeats: int = 3) -> float:
    """Milliseconds per call of ``steps`` calls of ``fn()`` back to back, from an idle GPU to the last one's end
    (host clock around a synchronised series: whichever of the host and the GPU is slower sets it), the median
    of ``repeats`` series."""
    import statistics  # noqa: PLC0415
    import time  # noqa: PLC0415

    import torch  # noqa: PLC0415

    series = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        began = time.perf_counter()
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
        series.append((time.perf_counter() - began) * 1e3 / steps)
    return statistics.median(series)


def same_bits(a, b) -> bool:
    """:func:`mok.validate.bitwise_equal`, for gradients that may be None (a leaf autograd left out)."""
    from mok.validate import bitwise_equal  # noqa: PLC0415

    if a is None or b is None:
        return a is None and b is None
    return bitwise_equal(a, b)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shapes", nargs="*", default=["qwen3.5-397b/ep64", "kimi-k2.7/ep64"])
    parser.add_argument("--backends", default="cuda,torch")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=4, help="calls per side and round")
    parser.add_argument("--steps", type=int, default=20, help="steps per steady-state series")
    args = parser.parse_args(argv)

    import torch  # noqa: PLC0415 (the CPU tests import this file without a GPU)

    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    from mok.bench.cli import parse_shapes  # noqa: PLC0415
    from mok.bench.harness import time_rotated  # noqa: PLC0415
    from mok.bench.problems import LayerProblem  # noqa: PLC0415

    print(f"{'shape':22s} {'backend':8s} {'eager ms':>9s} {'graph ms':>9s} {'graph/eager':>11s} "
          f"{'eager TF/s':>10s} {'graph TF/s':>10s} {'steady eager':>12s} {'steady graph':>12s}  "
          f"grads bitwise (same inputs, new inputs)", flush=True)
    for shape in parse_shapes(",".join(args.shapes), 1.0, 1):
        name = shape.name
        flops = shape.forward_flops * 3  # the backward counts twice the forward
        for backend in args.backends.split(","):
            problem = LayerProblem(shape, "bf16", torch.device("cuda"), n_sets=2, router=True)
            try:
                graph, eager, captured = capture_step(problem, backend)
            except Exception as error:  # noqa: BLE001 (a step that cannot be captured: say why, go on)
                torch.cuda.synchronize()
                steady_eager = steady_ms(lambda p=problem, b=backend: p.forward_backward(b, 0), args.steps)
                print(f"{name:22s} {backend:8s} steady eager {steady_eager:.3f} ms; capture failed: "
                      f"{type(error).__name__}: {str(error).splitlines()[0][:160]}", flush=True)
                del problem
                continue
            graph.replay()
            torch.cuda.synchronize()
            bitwise = all(same_bits(a, b) for a, b in zip(eager, captured))
            eager_new = [g.detach().clone() if g is not None else None for g in problem.forward_backward(backend, 1)]
            load_set(problem, 1)
            graph.replay()
            torch.cuda.synchronize()
            bitwise_new = all(same_bits(a, b) for a, b in zip(eager_new, captured))
            timings = time_rotated({"eager": lambda i, p=problem, b=backend: p.forward_backward(b, 0),
                                    "graph": lambda i, g=graph: g.replay()},
                                   device="cuda", rounds=args.rounds, calls=args.calls)
            eager_ms, graph_ms = timings["eager"].median_ms, timings["graph"].median_ms
            steady_eager = steady_ms(lambda p=problem, b=backend: p.forward_backward(b, 0), args.steps)
            steady_graph = steady_ms(graph.replay, args.steps)
            print(f"{name:22s} {backend:8s} {eager_ms:9.3f} {graph_ms:9.3f} {graph_ms / eager_ms:11.3f} "
                  f"{flops / eager_ms / 1e9:10.0f} {flops / graph_ms / 1e9:10.0f} "
                  f"{steady_eager:12.3f} {steady_graph:12.3f}  "
                  f"{bitwise}, {bitwise_new}", flush=True)
            del graph, eager, eager_new, captured, problem
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
