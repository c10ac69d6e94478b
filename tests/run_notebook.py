"""Execute a notebook headless and write the executed copy: ``python run_notebook.py IN OUT``.

`test_notebooks.py` runs this in a background job; a failing cell exits with its traceback.
The kernel runs from the notebook's directory, with the environment of this process.
"""

import sys
from pathlib import Path

import nbclient
import nbformat

if __name__ == "__main__":
    source, target = Path(sys.argv[1]), Path(sys.argv[2])
    notebook = nbformat.read(source, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3",
        resources={"metadata": {"path": str(source.parent)}},
    )
    try:
        client.execute()  # raises CellExecutionError with the failing cell's traceback
    finally:
        nbformat.write(notebook, target)
