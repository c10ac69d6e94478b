"""Execute every notebook in `notebooks/` headless, in fast mode, and fail on any error.

The notebooks reproduce the paper's experiments (see `notebooks/README.md`). Fast mode
(`JAXADJOINT_NOTEBOOK_MODE=fast`) shrinks every sweep to a few seconds of work and writes its
figures to a scratch folder, so the committed full-mode figures are never overwritten. The
kernel runs from the notebooks directory with `MPLBACKEND=Agg`, as a reader's would.
"""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))


def test_notebooks_exist():
    names = {path.stem for path in NOTEBOOKS}
    for expected in ("01_heat_equation", "02_van_der_pol", "03_lotka_volterra",
                     "04_fitting_with_optax", "05_neural_ode"):
        assert expected in names


def test_committed_figures_exist():
    """Readers on the web see the full-mode figures without running anything."""
    for name in ("heat_errors.png", "van_der_pol_fig2.png", "glv_trajectories.png",
                 "glv_fig3_methods.png", "glv_fig4_implementations.png", "glv_fig5_scaling.png",
                 "fitting_glv.png"):
        assert (NOTEBOOKS_DIR / name).is_file(), name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_in_fast_mode(path, monkeypatch):
    monkeypatch.setenv("JAXADJOINT_NOTEBOOK_MODE", "fast")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    figures_before = {p: p.stat().st_mtime_ns for p in NOTEBOOKS_DIR.glob("*.png")}
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},
    )
    client.execute()  # raises CellExecutionError with the failing cell's traceback
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "mode: fast" in text
    figures_after = {p: p.stat().st_mtime_ns for p in NOTEBOOKS_DIR.glob("*.png")}
    assert figures_after == figures_before, "fast mode must not overwrite the committed figures"
