"""scikit-learn's estimator bases and parameter constraints, or small stand-ins where only the serving
stack is installed.

Fitting needs scikit-learn (and torch); answering queries with a saved index needs neither. In an
environment holding only numpy, faiss-cpu and safetensors the estimators are built on the
stand-ins below, which keep the parameter protocol (``get_params``/``set_params``, nested
``name__param``) and the constraint objects of ``sklearn.utils._param_validation`` (``Interval``,
``Options``, ``StrOptions`` and ``validate_parameter_constraints``, with the same messages), and
nothing else.
"""

from __future__ import annotations

import inspect
import operator
from numbers import Integral
from typing import Any

import numpy as np

try:
    from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin, clone
except ImportError:  # a serving-only environment

    class BaseEstimator:  # type: ignore[no-redef]
        """The parameter protocol of scikit-learn's ``BaseEstimator``."""

        @classmethod
        def _get_param_names(cls) -> list[str]:
            signature = inspect.signature(cls.__init__)
            return sorted(p.name for p in signature.parameters.values()
                          if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))

        def get_params(self, deep: bool = True) -> dict[str, Any]:
            out = {}
            for name in self._get_param_names():
                value = getattr(self, name)
                if deep and hasattr(value, "get_params") and not isinstance(value, type):
                    out.update({f"{name}__{k}": v for k, v in value.get_params().items()})
                out[name] = value
            return out

        def set_params(self, **params: Any) -> "BaseEstimator":
            for key, value in params.items():
                name, _, nested = key.partition("__")
                if nested:
                    getattr(self, name).set_params(**{nested: value})
                else:
                    setattr(self, name, value)
            return self

        def __repr__(self) -> str:
            args = ", ".join(f"{k}={v!r}" for k, v in self.get_params(deep=False).items())
            return f"{type(self).__name__}({args})"

        def __getstate__(self) -> dict[str, Any]:  # as scikit-learn's: subclasses extend these
            return dict(self.__dict__)

        def __setstate__(self, state: dict[str, Any]) -> None:
            self.__dict__.update(state)

    class ClassifierMixin:  # type: ignore[no-redef]
        """Marks a classifier."""

        _estimator_type = "classifier"

    class TransformerMixin:  # type: ignore[no-redef]
        """``fit_transform`` from ``fit`` and ``transform``."""

        def fit_transform(self, X: Any, y: Any = None, **fit_params: Any) -> Any:
            return self.fit(X, y, **fit_params).transform(X)

    def clone(estimator: Any) -> Any:  # type: ignore[no-redef]
        """A new unfitted estimator with the same parameters."""
        params = {k: clone(v) if hasattr(v, "get_params") else v for k, v in estimator.get_params(False).items()}
        return type(estimator)(**params)


try:
    from sklearn.utils._param_validation import (
        Interval,
        InvalidParameterError,
        Options,
        StrOptions,
        validate_parameter_constraints,
    )
except ImportError:  # a serving-only environment: the constraints the package's tables use
    from .errors import InvalidParameterError  # type: ignore[assignment]  # bases as scikit-learn's

    class Options:  # type: ignore[no-redef]
        """Instances of ``type`` among ``options``."""

        def __init__(self, type: type, options: set[Any]) -> None:
            self.type, self.options = type, options

        def is_satisfied_by(self, val: Any) -> bool:
            return isinstance(val, self.type) and val in self.options

        def __str__(self) -> str:
            name = self.type.__qualname__ if self.type.__module__ == "builtins" else self.type.__name__
            return f"a {name} among {{{', '.join(repr(o) for o in self.options)}}}"

    class StrOptions(Options):  # type: ignore[no-redef]
        """Strings among ``options``."""

        def __init__(self, options: set[str]) -> None:
            super().__init__(str, options)

    class Interval:  # type: ignore[no-redef]
        """Numbers of ``type`` (``Integral`` or ``Real``) between ``left`` and ``right`` (None: unbounded)."""

        def __init__(self, type: type, left: float | None, right: float | None, *, closed: str) -> None:
            self.type, self.left, self.right, self.closed = type, left, right, closed

        def __contains__(self, val: Any) -> bool:
            if not isinstance(val, Integral) and np.isnan(val):
                return False
            below = operator.lt if self.closed in ("left", "both") else operator.le
            above = operator.gt if self.closed in ("right", "both") else operator.ge
            left = -np.inf if self.left is None else self.left
            right = np.inf if self.right is None else self.right
            return not below(val, left) and not above(val, right)

        def is_satisfied_by(self, val: Any) -> bool:
            return isinstance(val, self.type) and val in self

        def __str__(self) -> str:
            integer = self.type is Integral
            left = "-inf" if self.left is None else self.left if integer else float(self.left)
            right = "inf" if self.right is None else self.right if integer else float(self.right)
            opening = "[" if self.closed in ("left", "both") else "("
            closing = "]" if self.closed in ("right", "both") else ")"
            return f"{'an int' if integer else 'a float'} in the range {opening}{left}, {right}{closing}"

    class _InstancesOf:
        """Instances of ``type``; ``None`` stands for the value None itself."""

        def __init__(self, type: type | None) -> None:
            self.type = type

        def is_satisfied_by(self, val: Any) -> bool:
            return val is None if self.type is None else isinstance(val, self.type)

        def __str__(self) -> str:
            return "None" if self.type is None else f"an instance of {self.type.__qualname__!r}"

    def validate_parameter_constraints(parameter_constraints: dict[str, list[Any]], params: dict[str, Any],
                                       caller_name: str) -> None:  # type: ignore[no-redef]
        """Raise :class:`InvalidParameterError` unless each parameter meets one of its constraints."""
        for name, value in params.items():
            constraints = [c if hasattr(c, "is_satisfied_by") else _InstancesOf(c)
                           for c in parameter_constraints.get(name, ())]
            if constraints and not any(c.is_satisfied_by(value) for c in constraints):
                described = " or ".join(filter(None, [", ".join(str(c) for c in constraints[:-1]),
                                                      str(constraints[-1])]))
                raise InvalidParameterError(
                    f"The {name!r} parameter of {caller_name} must be {described}. Got {value!r} instead.")


__all__ = ["BaseEstimator", "ClassifierMixin", "Interval", "InvalidParameterError", "Options", "StrOptions",
           "TransformerMixin", "clone", "validate_parameter_constraints"]
