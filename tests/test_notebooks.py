"""The notebooks run top to bottom in small mode (CPU, tiny shapes, Triton interpreter), so they cannot rot.

Each notebook runs in a Jupyter kernel through nbclient, with a time limit per cell and per notebook; small mode
saves nothing (checked by pointing the results folder at an empty temporary directory). The in-process engine
that the GPU machine uses (it has no Jupyter) is tested on a synthetic notebook.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest

from mok.bench import notebook_runner

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = ["push_vs_pull.ipynb", "overlap_granularity.ipynb", "sm_wave_threshold.ipynb", "megakernel_anatomy.ipynb"]
CELL_TIMEOUT_S = 120
NOTEBOOK_TIMEOUT_S = 180


def _kernel_available() -> bool:
    if not all(importlib.util.find_spec(m) for m in ("nbclient", "nbformat", "ipykernel", "jupyter_client")):
        return False
    from jupyter_client.kernelspec import KernelSpecManager
    return "python3" in KernelSpecManager().find_kernel_specs()


needs_jupyter = pytest.mark.skipif(not _kernel_available(), reason="nbclient/ipykernel (python3 kernel) not installed")


@needs_jupyter
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_in_small_mode(name, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("MOK_NOTEBOOK_MODE", "small")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("MOK_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.delenv("OUT", raising=False)
    monkeypatch.delenv("MOK_NOTEBOOK_REFRESH", raising=False)
    nb = nbformat.read(str(NOTEBOOKS_DIR / name), as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS_DIR)}})
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the traceback, on the first failing cell
    took = time.perf_counter() - start
    assert took < NOTEBOOK_TIMEOUT_S, f"{name} took {took:.0f} s in small mode"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count for c in code), "every code cell must have run"
    assert not any(o.output_type == "error" for c in code for o in c.outputs)
    printed = "".join(o.get("text", "") for c in code for o in c.outputs if o.output_type == "stream")
    assert "mode: small" in printed
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir()), \
        "small mode must not save results"


def test_committed_notebooks_are_valid_and_hold_only_full_mode_outputs():
    for name in NOTEBOOKS:
        nb = json.loads((NOTEBOOKS_DIR / name).read_text())
        assert nb["nbformat"] == 4
        if importlib.util.find_spec("nbformat"):
            import nbformat
            nbformat.validate(nbformat.reads(json.dumps(nb), as_version=4))
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        outputs = [o for c in code for o in c["outputs"]]
        # Committed outputs come from the GPU run only (experiments/gpu_run.sh notebooks): never an error,
        # never small-mode CPU numbers.
        assert not any(o["output_type"] == "error" for o in outputs), f"{name} was committed with an error"
        if outputs:
            printed = "".join("".join(o.get("text", "")) for o in outputs if o["output_type"] == "stream")
            assert "mode: full" in printed, f"{name} holds outputs that are not from a full-mode run"


def _synthetic_notebook(path: Path) -> None:
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# synthetic"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["import matplotlib.pyplot as plt\n", "value = 6 * 7\n", "print('printed', value)\n", "value"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["fig, ax = plt.subplots()\n", "ax.plot([1, 2], [value, value + 1])\n", "plt.show()"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["raise ValueError('stop here')"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["print('never runs')"]},
    ]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


def test_inprocess_engine_captures_outputs_and_stops_at_the_first_error(tmp_path):
    pytest.importorskip("matplotlib")
    source, executed = tmp_path / "nb.ipynb", tmp_path / "out" / "nb.ipynb"
    _synthetic_notebook(source)
    report = notebook_runner.run_notebook(source, executed, engine="inprocess", timeout=60)
    assert report["error"] is not None and "stop here" in report["error"]
    cells = [c for c in json.loads(executed.read_text())["cells"] if c["cell_type"] == "code"]
    first, figure, failing, skipped = cells
    assert first["execution_count"] == 1
    assert "".join(first["outputs"][0]["text"]) == "printed 42\n"
    assert first["outputs"][1]["output_type"] == "execute_result"
    assert first["outputs"][1]["data"]["text/plain"] == ["42"]
    assert any(o["output_type"] == "display_data" and o["data"]["image/png"] for o in figure["outputs"])
    assert failing["outputs"][-1]["output_type"] == "error" and failing["outputs"][-1]["ename"] == "ValueError"
    assert skipped["outputs"] == [] and skipped["execution_count"] is None
