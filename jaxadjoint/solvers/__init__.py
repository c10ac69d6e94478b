"""The solver families: each supplies its step and the hand-derived adjoint of its step.

- `_explicit`: explicit Runge–Kutta methods, one generic step for every Butcher tableau
  (`_tableaus`, data) and their continuous extensions (`_interpolants`, data);
- `_rosenbrock`: Rosenbrock (linearly implicit) methods for stiff problems, one LU of
  ``I - gamma h J`` per step, with their hand-derived adjoint; tableaus in
  `_rosenbrock_tableaus` (data);
- `_esdirk`: Newton-iterated implicit (ESDIRK) methods, one LU of ``I - gamma h J`` per
  step, adjoint by the implicit function theorem (`_newton`: one implicit stage, its
  simplified Newton iteration and its tangent); tableaus in `_esdirk_tableaus` (data).

`_base` defines the interface every family implements.

The forward loop, the checkpoint strategies and the reverse sweep call a solver through
its family's step and step adjoint; they do not care which family took a step.  The
public names are re-exported by `jaxadjoint`.
"""
