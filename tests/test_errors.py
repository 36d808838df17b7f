"""Every error of the package lives in lfa_index.errors, below every other module."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from sklearn.exceptions import NotFittedError as SklearnNotFittedError

import lfa_index
import lfa_index.errors as errors

ERRORS = [obj for _, obj in inspect.getmembers(errors, inspect.isclass) if obj.__module__ == errors.__name__]


@pytest.mark.parametrize("error", [e for e in ERRORS if not issubclass(e, Warning)], ids=lambda e: e.__name__)
def test_every_error_derives_from_the_base_and_a_builtin(error):
    assert issubclass(error, errors.LFAIndexError)
    builtins = (ValueError, TypeError, ImportError, OSError, RuntimeError, AttributeError)
    assert error is errors.LFAIndexError or issubclass(error, builtins)


def test_not_fitted_is_ours_and_scikit_learns():
    assert issubclass(errors.NotFittedError, errors.LFAIndexError)
    assert issubclass(errors.NotFittedError, SklearnNotFittedError)


def test_one_missing_extra_error_for_sources_stores_and_integrations():
    from lfa_index import adapters, stores

    assert adapters.MissingExtraError is stores.MissingExtraError is errors.MissingExtraError
    assert not hasattr(adapters, "MissingDependencyError")


def test_the_errors_module_imports_nothing_from_the_package():
    tree = ast.parse(Path(errors.__file__).read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.startswith("lfa_index") or m.startswith(".") or m == ""]


def test_no_other_module_defines_an_error_class():
    root = Path(lfa_index.__file__).parent
    defined = []
    for path in root.rglob("*.py"):
        if path.name == "errors.py" and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                getattr(base, "id", getattr(base, "attr", "")).endswith(("Error", "Warning")) for base in node.bases
            ):
                defined.append(f"{path.relative_to(root)}:{node.name}")
    assert not defined


def test_the_persistence_errors_subclass_the_builtins_callers_catch():
    assert issubclass(errors.IndexVersionError, errors.IndexFormatError)
    assert issubclass(errors.IndexNotFoundError, errors.IndexFormatError)
    assert issubclass(errors.IndexNotFoundError, FileNotFoundError)
    assert issubclass(errors.IndexPermissionError, PermissionError)


def test_loading_nothing_raises_the_not_found_error(tmp_path):
    with pytest.raises(errors.IndexNotFoundError, match="no index directory"):
        lfa_index.AlignedIndex.load(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(errors.IndexFormatError, match="is a file") as caught:
        lfa_index.AlignedIndex.load(tmp_path / "file")
    assert not isinstance(caught.value, FileNotFoundError)
