"""Run the notebooks top to bottom and keep their outputs: ``python -m mok.bench.notebook_runner``.

Two engines:

* ``nbclient`` (a Jupyter kernel) where nbclient and ipykernel are installed: what CI uses;
* ``inprocess`` where they are not (the GPU machine has neither and no registry to fetch them): the code cells
  run in order in one namespace in this process, printed output and matplotlib figures are captured into the
  notebook's outputs in the standard nbformat 4 layout, and the first error stops the run, as in Jupyter.
  Notebooks meant for it avoid IPython magics and ``display``.

Usage::

    MOK_NOTEBOOK_MODE=full python -m mok.bench.notebook_runner notebooks/*.ipynb --out-dir "$OUT/notebooks"
    python -m mok.bench.notebook_runner notebooks/push_vs_pull.ipynb --mode small --inplace
"""

from __future__ import annotations

import argparse
import ast
import base64
import contextlib
import io
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any


class NotebookTimeout(Exception):
    """A notebook ran past its time limit."""


def _source(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _figures_as_outputs() -> list[dict[str, Any]]:
    """Every open matplotlib figure as a ``display_data`` PNG output; the figures are then closed."""
    if "matplotlib.pyplot" not in sys.modules:
        return []
    import matplotlib.pyplot as plt

    outputs = []
    for num in plt.get_fignums():
        fig = plt.figure(num)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
        outputs.append({"output_type": "display_data", "metadata": {},
                        "data": {"image/png": base64.b64encode(buf.getvalue()).decode("ascii"),
                                 "text/plain": [f"<Figure size {fig.get_size_inches()[0]:.0f}x"
                                                f"{fig.get_size_inches()[1]:.0f} inches>"]}})
    plt.close("all")
    return outputs


def _run_cell(code: str, namespace: dict[str, Any], cell_name: str) -> tuple[list[dict[str, Any]], BaseException | None]:
    """Execute one cell; returns its outputs (stream, result, figures, error) and the exception, if any."""
    out, err = io.StringIO(), io.StringIO()
    outputs: list[dict[str, Any]] = []
    failure: BaseException | None = None
    result = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            tree = ast.parse(code, filename=cell_name)
            last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            body = ast.Module(body=tree.body[:-1] if last else tree.body, type_ignores=[])
            exec(compile(body, cell_name, "exec"), namespace)
            if last is not None:
                result = eval(compile(ast.Expression(last.value), cell_name, "eval"), namespace)
        except BaseException as exc:  # noqa: BLE001  (a notebook error is data to record, not to raise here)
            failure = exc
    for name, stream in (("stdout", out), ("stderr", err)):
        if stream.getvalue():
            outputs.append({"output_type": "stream", "name": name, "text": _lines(stream.getvalue())})
    if failure is None and result is not None:
        outputs.append({"output_type": "execute_result", "metadata": {}, "execution_count": None,
                        "data": {"text/plain": _lines(repr(result))}})
    outputs.extend(_figures_as_outputs())
    if failure is not None:
        outputs.append({"output_type": "error", "ename": type(failure).__name__, "evalue": str(failure),
                        "traceback": traceback.format_exception(type(failure), failure, failure.__traceback__)})
    return outputs, failure


def run_inprocess(nb: dict[str, Any], workdir: Path, timeout: float) -> tuple[dict[str, Any], str | None]:
    """Execute a notebook's code cells in this process; returns the notebook with outputs and the error."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        plt.show = lambda *args, **kwargs: None  # figures are captured at the end of each cell instead
    except ImportError:
        pass

    def on_alarm(signum, frame):
        raise NotebookTimeout(f"notebook ran past {timeout:.0f} s")

    namespace: dict[str, Any] = {"__name__": "__main__"}
    old_cwd = os.getcwd()
    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(max(1, int(timeout)))
    error = None
    count = 0
    try:
        os.chdir(workdir)
        for index, cell in enumerate(nb["cells"]):
            if cell.get("cell_type") != "code":
                continue
            count += 1
            outputs, failure = _run_cell(_source(cell), namespace, f"<cell {index}>")
            for output in outputs:
                if output["output_type"] == "execute_result":
                    output["execution_count"] = count
            cell["outputs"], cell["execution_count"] = outputs, count
            if failure is not None:
                error = f"cell {index}: {type(failure).__name__}: {failure}"
                break
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old_handler)
        os.chdir(old_cwd)
    return nb, error


def nbclient_available() -> bool:
    try:
        import ipykernel  # noqa: F401
        import nbclient  # noqa: F401
        import nbformat  # noqa: F401
    except ImportError:
        return False
    return True


def run_nbclient(path: Path, workdir: Path, timeout: float) -> tuple[dict[str, Any], str | None]:
    """Execute with a Jupyter kernel (nbclient); returns the notebook (as a dict) and the error."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(str(path), as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(workdir)}})
    error = None
    try:
        client.execute()
    except CellExecutionError as exc:
        error = str(exc).strip().splitlines()[-1] if str(exc).strip() else "cell error"
    except Exception as exc:  # kernel death, timeout
        error = f"{type(exc).__name__}: {exc}"
    return json.loads(nbformat.writes(nb)), error


def run_notebook(path: str | os.PathLike, out_path: str | os.PathLike | None = None, *, mode: str | None = None,
                 timeout: float = 600, engine: str = "auto") -> dict[str, Any]:
    """Run one notebook; write the executed copy to ``out_path`` (if given).

    Args:
        path: the ``.ipynb`` file; it runs with its own folder as the working directory.
        mode: sets ``MOK_NOTEBOOK_MODE`` (``small`` also sets ``TRITON_INTERPRET=1``); ``None`` keeps the env.
        timeout: seconds for the whole notebook (in-process) or per cell (nbclient).
        engine: ``"nbclient"``, ``"inprocess"`` or ``"auto"`` (nbclient when installed).
    Returns:
        ``{"notebook", "engine", "seconds", "error", "out_path"}``.
    """
    path = Path(path).resolve()
    if mode is not None:
        os.environ["MOK_NOTEBOOK_MODE"] = mode
        if mode == "small":
            os.environ.setdefault("TRITON_INTERPRET", "1")
    if engine == "auto":
        engine = "nbclient" if nbclient_available() else "inprocess"
    start = time.perf_counter()
    if engine == "nbclient":
        nb, error = run_nbclient(path, path.parent, timeout)
    elif engine == "inprocess":
        nb, error = run_inprocess(json.loads(path.read_text()), path.parent, timeout)
    else:
        raise ValueError(f"engine must be 'auto', 'nbclient' or 'inprocess', got {engine!r}")
    seconds = time.perf_counter() - start
    if out_path is not None:
        out_path = Path(out_path)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return {"notebook": str(path), "engine": engine, "seconds": seconds, "error": error,
            "out_path": str(out_path) if out_path else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mok.bench.notebook_runner", description=__doc__.split("\n\n")[0])
    p.add_argument("notebooks", nargs="+")
    p.add_argument("--mode", choices=("small", "full"), default=None, help="default: $MOK_NOTEBOOK_MODE")
    p.add_argument("--engine", choices=("auto", "nbclient", "inprocess"), default="auto")
    p.add_argument("--timeout", type=float, default=600)
    dest = p.add_mutually_exclusive_group()
    dest.add_argument("--out-dir", default=None, help="write executed copies here")
    dest.add_argument("--inplace", action="store_true", help="overwrite the notebooks with their outputs")
    args = p.parse_args(argv)
    failed = 0
    for nb_path in args.notebooks:
        out = nb_path if args.inplace else (Path(args.out_dir) / Path(nb_path).name if args.out_dir else None)
        report = run_notebook(nb_path, out, mode=args.mode, timeout=args.timeout, engine=args.engine)
        status = "ok" if report["error"] is None else f"FAILED: {report['error']}"
        print(f"notebook {Path(nb_path).name}: {status} ({report['engine']}, {report['seconds']:.1f} s)"
              + (f" -> {out}" if out else ""), flush=True)
        failed += report["error"] is not None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
