"""Build the notebooks from their percent-format sources in `_src/`, optionally executing them.

    python notebooks/_build.py --execute       # rebuild and execute in full mode, saving outputs
    python notebooks/_build.py --execute 02    # only the notebooks whose name starts with 02
    python notebooks/_build.py                 # rebuild without executing: keeps the outputs of
                                               # code cells whose source did not change
    python notebooks/_build.py --clear         # rebuild without any outputs

Sources are plain Python: `# %%` starts a code cell, `# %% [markdown]` a Markdown cell whose
lines start with `# `. Execution runs from this directory with `JAXADJOINT_NOTEBOOK_MODE=full`
(override the mode through the environment) and matplotlib's inline backend, as in Jupyter:
each figure a notebook saves beside it (`fig.savefig`) is also embedded in the notebook as an
image output by its `plt.show()`, so readers on the web see it.  Afterwards every image the run
made, embedded or saved, is recompressed as a 256-colour PNG, which keeps the figures sharp
and the committed notebooks small.
"""

import base64
import io
import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from PIL import Image

HERE = Path(__file__).resolve().parent
# The kernel's backend: set explicitly, so that an `MPLBACKEND=Agg` in the caller's
# environment cannot make `plt.show()` a no-op and leave the notebook without its figures.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def parse(source: str) -> list:
    cells, kind, lines = [], None, []

    def flush():
        text = "\n".join(lines).strip("\n")
        if kind == "markdown":
            text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                             for line in text.splitlines())
            cells.append(nbformat.v4.new_markdown_cell(text))
        elif kind == "code" and text:
            cells.append(nbformat.v4.new_code_cell(text))

    for line in source.splitlines():
        if line.startswith("# %%"):
            flush()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        elif kind is not None:
            lines.append(line)
    flush()
    return cells


def build(src: Path) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = parse(src.read_text())
    nb.metadata["kernelspec"] = {
        "name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def keep_outputs(nb: nbformat.NotebookNode, path: Path) -> None:
    """Copy outputs from the executed notebook at `path` into the code cells of `nb` whose
    source is unchanged; complain about the others (they need `--execute`)."""
    old = {c.source: c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if cell.source in old:
            cell.outputs = old[cell.source].outputs
            cell.execution_count = old[cell.source].execution_count
        else:
            print(f"{path.name}: a code cell changed, run with --execute: {cell.source[:60]!r}")


def compress_png(data: bytes) -> bytes:
    """`data` as a PNG with a 256-colour palette (flattened on white), if that is smaller.

    Plots have few distinct colours (lines, text and their anti-aliased edges), so the
    palette loses nothing visible and the file shrinks about threefold.
    """
    image = Image.open(io.BytesIO(data))
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        image = image.convert("RGBA")
        flat = Image.new("RGB", image.size, "white")
        flat.paste(image, mask=image.getchannel("A"))
        image = flat
    palette = image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT,
                                             dither=Image.Dither.NONE)
    out = io.BytesIO()
    palette.save(out, format="PNG", optimize=True)
    return min(data, out.getvalue(), key=len)


def compress_images(nb: nbformat.NotebookNode) -> None:
    """Recompress the PNG outputs of `nb` in place."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                data = base64.b64decode(output.data["image/png"])
                output.data["image/png"] = base64.b64encode(compress_png(data)).decode("ascii")


def run(nb: nbformat.NotebookNode) -> None:
    """Run `nb` in a fresh kernel from this directory, with its figures embedded inline, and
    recompress the images it made: its PNG outputs and the PNG files it wrote here."""
    os.environ.setdefault("JAXADJOINT_NOTEBOOK_MODE", "full")
    os.environ["MPLBACKEND"] = INLINE_BACKEND
    before = {path: path.stat().st_mtime_ns for path in HERE.glob("*.png")}
    NotebookClient(nb, timeout=1800, kernel_name="python3",
                   resources={"metadata": {"path": str(HERE)}}).execute()
    compress_images(nb)
    for path in HERE.glob("*.png"):
        if before.get(path) != path.stat().st_mtime_ns:
            path.write_bytes(compress_png(path.read_bytes()))


def main(argv: list[str]) -> None:
    execute = "--execute" in argv
    prefixes = [a for a in argv if not a.startswith("--")]
    for src in sorted((HERE / "_src").glob("[0-9]*.py")):
        if prefixes and not any(src.stem.startswith(p) for p in prefixes):
            continue
        nb = build(src)
        if execute:
            start = time.perf_counter()
            run(nb)
            print(f"{src.stem}: executed in {time.perf_counter() - start:.0f} s")
        elif "--clear" not in argv and (HERE / f"{src.stem}.ipynb").exists():
            keep_outputs(nb, HERE / f"{src.stem}.ipynb")
        nbformat.write(nb, HERE / f"{src.stem}.ipynb")


if __name__ == "__main__":
    main(sys.argv[1:])
