"""Parameter checks: scikit-learn's constraint objects (``Interval``, ``StrOptions``, ``Options``) and its
``validate_parameter_constraints``, raising the package's typed :class:`InvalidParameterError`.

Where scikit-learn is not installed (torch-free serving) the stand-ins of :mod:`lfa_index.compat` take
their place, with the same messages. Estimators declare ``_parameter_constraints`` tables; single
arguments of methods are checked with :func:`check_number` or :func:`check_param`.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ...compat import Interval as _Interval
from ...compat import InvalidParameterError as ConstraintError
from ...compat import Options, StrOptions, validate_parameter_constraints
from ...errors import InvalidParameterError

BOOLEAN = Options(bool, {False, True})
"""True or False, and nothing else (not 0/1, not numpy's bool_)."""


class Interval(_Interval):
    """scikit-learn's ``Interval``, also refusing booleans and infinities (True is no count, inf no rate).

    >>> Interval(Integral, 1, None, closed="left").is_satisfied_by(True)
    False
    """

    def is_satisfied_by(self, val: Any) -> bool:
        return (not isinstance(val, bool) and super().is_satisfied_by(val)
                and (isinstance(val, Integral) or bool(np.isfinite(val))))

    def __str__(self) -> str:
        text = super().__str__()
        return text if self.type is Integral else text.replace("a float", "a finite float", 1)


def validate_params(params: Mapping[str, Any], constraints: Mapping[str, Sequence[Any]], caller: str) -> None:
    """scikit-learn's ``validate_parameter_constraints``: raise :class:`InvalidParameterError` (ours, a
    ValueError and TypeError) unless every parameter of ``caller`` meets one of its constraints.

    Constraints are those of ``_parameter_constraints`` tables: :class:`Interval`, ``StrOptions``,
    ``Options``, ``None`` or a type.
    """
    try:
        validate_parameter_constraints(dict(constraints), dict(params), caller_name=caller)
    except ConstraintError as err:
        raise InvalidParameterError(str(err)) from None


def check_param(value: Any, name: str, constraints: Sequence[Any]) -> Any:
    """``value`` if it meets one of ``constraints`` (constraint objects), else :class:`InvalidParameterError`."""
    if not any(c.is_satisfied_by(value) for c in constraints):
        described = " or ".join(str(c) for c in constraints)
        raise InvalidParameterError(f"{name} must be {described}, got {value!r}.")
    return value


def check_number(
    value: Any,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
    integer: bool = False,
) -> Any:
    """``value`` as an int (``integer``) or a float if it is a finite number in range, else
    :class:`InvalidParameterError`.

    >>> k = check_number(k, "k", low=1, integer=True)
    """
    closed = {(True, True): "both", (True, False): "left", (False, True): "right", (False, False): "neither"}
    side = (low is not None and low_inclusive, high is not None and high_inclusive)  # no bound: an open end
    check_param(value, name, [Interval(Integral if integer else Real, low, high, closed=closed[side])])
    return int(value) if integer else float(value)


def check_choice(value: Any, name: str, choices: Iterable[Any]) -> Any:
    """``value`` if it is one of ``choices`` (of the same type), else :class:`InvalidParameterError`."""
    return check_param(value, name, options(*choices))


def options(*choices: Any) -> list[Any]:
    """Constraints for a set of values: ``StrOptions`` for the strings, ``Options(type, ...)`` for the rest."""
    strings = {c for c in choices if isinstance(c, str)}
    others: dict[type, set[Any]] = {}
    for c in choices:
        if not isinstance(c, str):
            others.setdefault(type(c), set()).add(c)
    return ([StrOptions(strings)] if strings else []) + [Options(t, v) for t, v in others.items()]
