"""Every input and parameter check of lfa-index, in one package below all layers.

- :mod:`.arrays`: embeddings, labels, ids and restored arrays (numpy only);
- :mod:`.queries`: queries of a fitted index, one FAISS pass per batch;
- :mod:`.texts`: texts to embed;
- :mod:`.fitted`: whether an estimator is fitted (scikit-learn's protocol, our typed error);
- :mod:`.params`: ``_parameter_constraints`` tables and single parameters, on scikit-learn's
  ``sklearn.utils._param_validation`` (stand-ins in :mod:`lfa_index.compat` where it is absent).

Each raises a typed error of :mod:`lfa_index.errors` that says what was wrong and how to fix it.
"""

from .arrays import (
    ArrayLike,
    as_real_array,
    check_array,
    check_embeddings,
    check_ids,
    check_index_labels,
    check_stored_array,
    weighted_accuracy,
)
from .fitted import check_is_fitted
from .params import (
    BOOLEAN,
    Interval,
    Options,
    StrOptions,
    check_choice,
    check_number,
    check_param,
    options,
    validate_params,
)
from .queries import check_more_support, check_query_matrix, check_text_matrix
from .texts import check_texts

__all__ = [
    "BOOLEAN", "ArrayLike", "Interval", "Options", "StrOptions", "as_real_array", "check_array", "check_choice",
    "check_embeddings", "check_ids", "check_index_labels", "check_is_fitted", "check_more_support", "check_number",
    "check_param", "check_query_matrix", "check_stored_array", "check_text_matrix", "check_texts",
    "options", "validate_params", "weighted_accuracy",
]
