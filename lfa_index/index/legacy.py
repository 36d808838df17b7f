"""Index formats 1 and 2 (before ``index_format``), upgraded to format 3 on load.

Formats 1 and 2 wrote the estimator's state under names of their own (``W``, ``lfa_prototypes``,
a ``lfa`` document of selected values), the LFA options flattened into the index's parameters, and
the class prototypes and biases of the index besides the estimator's. Format 1 predates the options
beyond the paper (class biases, centring, hybrid and trained prototypes, averaged maps), which it
holds off. This module is the frozen map from those names to ``LFA.from_fitted_state``'s.

Example
-------
>>> doc, arrays = upgrade(doc, arrays)    # then read as format 3
"""

from __future__ import annotations

from typing import Any

import numpy as np

# format-1/2 array name -> the estimator attribute it held
_ARRAYS = {
    "W": "W_", "W_tt": "W_tt_", "W_avg": "W_avg_", "lfa_prototypes": "prototypes_",
    "lfa_text_prototypes": "text_prototypes_", "lfa_intercept": "intercept_", "lfa_feature_mean": "feature_mean_",
    "lfa_refined_prototypes": "refined_prototypes_", "projection": "projection_", "beta_scores": "beta_scores_",
    "assignments": "assignments_",
}
# format-1/2 value name -> the estimator attribute it held
_VALUES = {
    "n_features_in": "n_features_in_", "projection_side": "projection_side_", "beta": "beta_", "steps": "steps_",
    "step_trials": "step_trials_", "beta_selection": "beta_selection_", "loss_curve": "loss_curve_",
    "hubness_init": "hubness_init_", "hubness": "hubness_", "projection_kind": "projection_kind_",
    "center": "center_", "prototype_mix": "prototype_mix_", "refine_prototypes": "refine_prototypes_",
    "mapping": "mapping_", "selection": "selection_",
}
_INDEX_ARRAYS = (
    "text_embeddings", "is_new_class", "support_embeddings", "support_labels", "folded_task", "folded_tt",
    "corpus_query_map", "corpus_query_offset",
)


def upgrade(doc: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``params.json`` and the arrays of a format-1/2 index, as format 3 holds them."""
    params = dict(doc["params"])
    options = params.pop("lfa_options")
    fitted = doc["lfa"]
    n_classes = int(fitted["n_classes"])
    w = arrays["W"]
    # format 1 holds the paper's classifier: text prototypes, no bias, no centring, the task map
    defaults = {
        "lfa_text_prototypes": arrays["lfa_prototypes"],
        "lfa_intercept": np.zeros(n_classes, dtype=np.float32),
        "lfa_feature_mean": np.zeros(w.shape[0], dtype=np.float32),
    }
    lfa_arrays = {
        _ARRAYS[name]: arrays.get(name, defaults.get(name)) for name in _ARRAYS if name in arrays or name in defaults
    }
    values = {attribute: fitted.get(name) for name, attribute in _VALUES.items()}
    values.update(
        classes_=list(range(n_classes)),
        projection_kind_=fitted.get("projection_kind", "shrink" if fitted["projection_side"] else None),
        center_=bool(fitted.get("center", False)),
        prototype_mix_=float(fitted.get("prototype_mix", 0.0)),
        refine_prototypes_=bool(fitted.get("refine_prototypes", False)),
        mapping_=fitted.get("mapping", "task"),
    )
    upgraded = {
        "index_format": 3,
        "params": {**params, "lfa": options},
        "label_space": doc["label_space"],
        "class_names": doc["class_names"],
        "lfa": {"params": options, "state": values},
        "corpus": doc["corpus"],
    }
    out = {"lfa." + attribute: value for attribute, value in lfa_arrays.items()}
    out.update({name: arrays[name] for name in _INDEX_ARRAYS if name in arrays})
    # the index's prototypes were the estimator's, then those of classes added from text since
    out["added_prototypes"] = arrays["prototypes"][n_classes:]
    return upgraded, out
