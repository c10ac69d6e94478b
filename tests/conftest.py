"""Strict numerics for every test: float64, and no silent dtype promotion.

Also starts the background jobs (`background_jobs.py`) of the selected tests once they are
collected, and ends them with the session.
"""

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "background(*names): checks the results of jobs of tests/background_jobs.py"
    )


def pytest_collection_finish(session):
    import background_jobs as background

    names = [name for item in session.items for m in item.iter_markers("background")
             for name in m.args]
    background.start(names)


def pytest_unconfigure(config):
    import background_jobs as background

    background.stop()
