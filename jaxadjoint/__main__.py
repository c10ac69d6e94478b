"""``python -m jaxadjoint``: the tour (`jaxadjoint.tour`), real sensitivities verified and
timed."""

from jaxadjoint.tour import main

if __name__ == "__main__":
    main(prog="python -m jaxadjoint")
