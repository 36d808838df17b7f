"""scikit-learn's estimator bases, or small stand-ins where only the serving stack is installed.

Fitting needs scikit-learn (and torch); answering queries with a saved index needs neither. In an
environment holding only numpy, faiss-cpu and safetensors the estimators are built on the
stand-ins below, which keep the parameter protocol (``get_params``/``set_params``, nested
``name__param``) and nothing else.
"""

from __future__ import annotations

import inspect
from typing import Any

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


__all__ = ["BaseEstimator", "ClassifierMixin", "TransformerMixin", "clone"]
