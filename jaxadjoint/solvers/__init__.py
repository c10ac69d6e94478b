"""The solver families: each supplies its step and the hand-derived adjoint of its step.

- `_explicit`: explicit Runge–Kutta methods, one generic step for every Butcher tableau
  (`_tableaus`, data) and their continuous extensions (`_interpolants`, data).

The forward loop, the checkpoint strategies and the reverse sweep call a solver through
its family's step and step adjoint; they do not care which family took a step.  The
public names are re-exported by `jaxadjoint`.
"""
