"""Whether an estimator is fitted: scikit-learn's ``__sklearn_is_fitted__`` protocol, with our typed error."""

from __future__ import annotations

import inspect
from typing import Any

from ...errors import NotFittedError


def check_is_fitted(estimator: Any) -> None:
    """Raise :class:`~lfa_index.errors.NotFittedError` unless ``estimator.__sklearn_is_fitted__()``.

    As scikit-learn's ``check_is_fitted``, without needing scikit-learn; the message names the call
    that fits it (and ``load`` where the class has one).

    >>> check_is_fitted(LFA())
    NotFittedError: this LFA is not fitted yet; call fit(X, y, text_emb, class_names) first.
    """
    if estimator.__sklearn_is_fitted__():
        return
    cls = type(estimator)
    params = [p.name for p in list(inspect.signature(cls.fit).parameters.values())[1:]
              if p.kind is p.POSITIONAL_OR_KEYWORD]
    load = f" or {cls.__name__}.load(path)" if hasattr(cls, "load") else ""
    raise NotFittedError(f"this {cls.__name__} is not fitted yet; call fit({', '.join(params)}){load} first.")
