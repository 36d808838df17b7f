"""A saved index answers queries where only numpy, faiss-cpu and safetensors are installed.

The serving process runs with torch, scikit-learn, scipy and every other fit-time dependency made
unimportable by a ``sys.meta_path`` blocker, loads the index and the aligned corpus saved beside it and
writes their answers; they must equal the answers of the full environment.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from synthetic import planted_gap_problem

import lfa_index.core
from lfa_index import LFA, AlignedCorpus, AlignedIndex
from lfa_index.stores import FaissStore, search_unaligned

BLOCKED = ("torch", "sklearn", "scipy", "tqdm", "ot", "pandas", "pyarrow", "sentence_transformers", "matplotlib")

SERVE = textwrap.dedent(
    """
    import sys
    BLOCKED = set(sys.argv[4].split(","))

    class Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is not installed here")

    sys.meta_path.insert(0, Blocker())
    import copy
    import pickle

    import numpy as np
    from lfa_index import LFA, AlignedCorpus, AlignedIndex
    from lfa_index.stores import FaissStore
    from lfa_index.stores.aligned import classify, prototype_dim, search_classes, search_unaligned, write_prototypes

    blank = AlignedIndex(lfa=LFA(steps=3))  # an unfitted clone travels to workers by pickle
    assert repr(pickle.loads(pickle.dumps(blank))) == repr(copy.deepcopy(blank)) == repr(blank)
    index = AlignedIndex.load(sys.argv[1])
    corpus = AlignedCorpus.load(sys.argv[1] + ".corpus")
    data = np.load(sys.argv[2])
    queries, text = data["queries"], data["text"]
    raw = FaissStore(dim=queries.shape[1]).add(queries, ids=np.arange(len(queries)))
    store = write_prototypes(index, FaissStore(dim=prototype_dim(index)))
    answers = {
        "predict": index.predict(queries), "proba": index.predict_proba(queries),
        "search_scores": index.search(queries, 3)[0], "search_labels": index.search(queries, 3)[1],
        "text_ids": corpus.search_text(text, 5)[1], "corpus_ids": corpus.search(queries, 5)[1],
        "unaligned_ids": search_unaligned(index, raw, text, 5, overfetch=2)[1],
        "prototypes": index.aligned_prototypes(), "prepared": index.prepare_queries(queries),
        "store_classify": classify(index, store, queries), "store_labels": search_classes(index, store, queries, 3)[1],
        "transform": index.transform(queries),
    }
    np.savez(sys.argv[3], **answers)
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print("leaked", leaked)
    """
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    x, y, p, queries, _ = planted_gap_problem(n_classes=8, n_test=6, seed=2)
    folder = tmp_path_factory.mktemp("serve")
    index = AlignedIndex(lfa=LFA(steps=10, prototype_mix=0.5, center=True, random_state=0)).fit(x, y, p)
    index.add_classes(p[:2] + 0.1)
    index.save(folder / "index")
    corpus = AlignedCorpus(index).add(queries)
    corpus.save(folder / "index.corpus")
    text = p[:3]
    np.savez(folder / "inputs.npz", queries=queries, text=text)
    return index, corpus, folder, queries, text


def test_a_saved_index_answers_identically_without_torch_or_scikit_learn(saved):
    index, corpus, folder, queries, text = saved
    result = subprocess.run(
        [sys.executable, "-c", SERVE, str(folder / "index"), str(folder / "inputs.npz"), str(folder / "out.npz"),
         ",".join(BLOCKED)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "leaked []" in result.stdout
    got = np.load(folder / "out.npz", allow_pickle=False)
    np.testing.assert_array_equal(got["predict"], index.predict(queries))
    np.testing.assert_allclose(got["proba"], index.predict_proba(queries), rtol=1e-6, atol=1e-7)
    scores, labels = index.search(queries, 3)
    np.testing.assert_array_equal(got["search_labels"], labels)
    np.testing.assert_allclose(got["search_scores"], scores, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got["text_ids"], corpus.search_text(text, 5)[1])
    np.testing.assert_array_equal(got["corpus_ids"], corpus.search(queries, 5)[1])
    raw = FaissStore(dim=queries.shape[1]).add(queries, ids=np.arange(len(queries)))
    np.testing.assert_array_equal(got["unaligned_ids"], search_unaligned(index, raw, text, 5, overfetch=2)[1])
    np.testing.assert_array_equal(got["prototypes"], index.aligned_prototypes())
    np.testing.assert_array_equal(got["prepared"], index.prepare_queries(queries))
    np.testing.assert_array_equal(got["store_classify"], index.predict(queries))
    np.testing.assert_array_equal(got["store_labels"], labels)
    np.testing.assert_array_equal(got["transform"], index.transform(queries))


def test_importing_the_package_does_not_import_torch():
    code = "import sys, lfa_index; print(sorted(m for m in ('torch', 'ot', 'tqdm') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]


def test_fitting_without_torch_says_which_install_brings_it():
    code = textwrap.dedent(
        """
        import sys
        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "torch":
                    raise ImportError("No module named 'torch'")
        sys.meta_path.insert(0, Blocker())
        import numpy as np
        from lfa_index import LFA, MissingExtraError
        try:
            LFA(steps=1).fit(np.eye(4, 8) + 0.1, [0, 1, 0, 1], np.eye(2, 8) + 0.1)
        except MissingExtraError as err:
            print("typed:", err)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "typed:" in out.stdout and "pip install lfa-index" in out.stdout, out.stdout + out.stderr[-2000:]


def test_every_core_module_outside_solvers_imports_without_torch():
    """The folder boundary: only ``core/solvers/`` may import torch at import time."""
    core = Path(lfa_index.core.__file__).parent
    names = sorted(".".join(("lfa_index", "core", *p.relative_to(core).with_suffix("").parts))
                   for p in core.rglob("*.py") if p.parts[-2] != "solvers" and p.stem != "__init__")
    assert {"lfa_index.core.state", "lfa_index.core.serving", "lfa_index.core.validation.params"} <= set(names)
    code = textwrap.dedent(
        f"""
        import importlib, sys
        class Blocker:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "torch":
                    raise ImportError("No module named 'torch'")
        sys.meta_path.insert(0, Blocker())
        for name in {names!r}:
            importlib.import_module(name)
        print("imported", len({names!r}))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == f"imported {len(names)}", out.stderr[-2000:]
    solvers = sorted(p.stem for p in (core / "solvers").glob("*.py") if p.stem != "__init__")
    assert all("import torch" in (core / "solvers" / f"{name}.py").read_text() for name in solvers)
