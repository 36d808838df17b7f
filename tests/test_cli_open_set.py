"""Through the real console script (``python -m lfa_index.cli``) on real texts (the shipped Banking77
subset, MiniLM): the index remembers its encoders, refuses another one, embeds readable class
names, checks labels before embedding, keeps results under ``-q`` and reports the open set.

Six known intents, four shots each; the eval and calibration rows add three other intents
labelled ``oos``.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lfa_index import AlignedIndex
from lfa_index.adapters import make_encoder, minilm_path
from lfa_index.data import banking77_subset
from lfa_index.reporting import open_set_metrics

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
KNOWN = ("card_arrival", "pin_blocked", "exchange_rate", "top_up_failed", "lost_or_stolen_card",
         "cash_withdrawal_charge")
OUT_OF_SCOPE = ("age_limit", "apple_pay_or_google_pay", "visa_or_mastercard")
SHOTS = 4


def cli(*argv: object, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``python -m lfa_index.cli ARGV`` (what the ``lfa-index`` script runs), CPU, one thread."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "lfa_index.cli", *map(str, argv)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def write_csv(path: Path, rows: list[tuple[str, str]], header: tuple[str, str] = ("text", "label")) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    return path


def read_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def error_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and lines and lines[-1].startswith("lfa-index: error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[-1]


@pytest.fixture(scope="module")
def texts(tmp_path_factory) -> Path:
    """support.csv, queries.csv (known + oos), calibration.csv (known + oos), names.csv."""
    folder = tmp_path_factory.mktemp("open_set")
    data = banking77_subset()
    ids = np.asarray(data.class_ids)
    train, test = ids[data.train_labels], ids[data.test_labels]
    support = [(t, c) for c in KNOWN for t in np.asarray(data.train_texts)[train == c][:SHOTS]]
    calibration = [(t, c) for c in KNOWN for t in np.asarray(data.train_texts)[train == c][SHOTS:SHOTS + 6]]
    calibration += [(t, "oos") for c in OUT_OF_SCOPE for t in np.asarray(data.train_texts)[train == c][:6]]
    queries = [(t, c) for c in KNOWN for t in np.asarray(data.test_texts)[test == c][:8]]
    queries += [(t, "oos") for c in OUT_OF_SCOPE for t in np.asarray(data.test_texts)[test == c][:8]]
    write_csv(folder / "support.csv", support)
    write_csv(folder / "calibration.csv", calibration)
    write_csv(folder / "queries.csv", queries)
    write_csv(folder / "in_scope.csv", [q for q in queries if q[1] != "oos"])
    write_csv(folder / "names.csv", [(c, c.replace("_", " ")) for c in KNOWN], header=("label", "name"))
    return folder


@pytest.fixture(scope="module")
def index_dir(texts) -> Path:
    """An index fitted through the CLI: MiniLM on both sides, readable names, τ set on calibration.csv."""
    done = cli("fit", "-q", "--texts", texts / "support.csv", "--model", "minilm", "--class-names",
               texts / "names.csv", "--calibrate-on", texts / "calibration.csv", "--unknown-label", "oos",
               "--objective", "macro-f1", "--steps", 30, "--device", "cpu", "--no-cache", "-o", texts / "idx")
    assert done.returncode == 0, done.stderr
    assert "rejection threshold" in done.stderr and "saved in the index" in done.stderr, done.stderr
    assert "LFA fit:" in done.stderr  # -q silenced the progress bar, not the summary line
    return texts / "idx"


@pytest.fixture(scope="module")
def minilm():
    return make_encoder("minilm", progress=False, device="cpu")


def test_the_index_saves_its_encoder_specs_and_predict_needs_no_model(index_dir, texts, minilm):
    index = AlignedIndex.load(index_dir)
    assert index.encoders_ == {"document": "minilm", "name": "minilm"}
    done = cli("predict", index_dir, "--texts", texts / "in_scope.csv", "--reject-below", "none", "--no-cache")
    assert done.returncode == 0, done.stderr
    rows = read_csv(done.stdout)
    queries = [r["text"] for r in read_csv((texts / "in_scope.csv").read_text())]
    assert [r["query"] for r in rows] == queries
    assert [r["label"] for r in rows] == list(index.predict(minilm.embed_texts(queries)))


def test_a_different_model_is_refused_unless_forced(index_dir, texts):
    other = f"st:{minilm_path()}"  # the same weights under another SPEC: refused all the same
    refused = cli("predict", index_dir, "--texts", texts / "queries.csv", "--model", other, "--no-cache")
    line = error_line(refused)
    assert "--model minilm" in line and "--force" in line, line
    forced = cli("predict", index_dir, "--texts", texts / "in_scope.csv", "--model", other, "--force", "--no-cache")
    assert forced.returncode == 0, forced.stderr
    assert len(read_csv(forced.stdout)) == len(KNOWN) * 8


def test_class_names_file_embeds_readable_names_and_the_index_keeps_the_ids(index_dir, minilm):
    index = AlignedIndex.load(index_dir)
    assert list(index.classes_) == sorted(KNOWN)
    readable = minilm.embed_texts([c.replace("_", " ") for c in index.classes_])
    raw_ids = minilm.embed_texts(list(index.classes_))
    np.testing.assert_allclose(index.text_embeddings_, readable, atol=1e-5)
    assert not np.allclose(index.text_embeddings_, raw_ids, atol=1e-3)


def test_labels_are_checked_before_anything_is_embedded(texts, index_dir):
    """An encoder that cannot load would fail at the first embedding: the label error comes first."""
    (texts / "five.txt").write_text("\n".join(KNOWN[:5]) + "\n")
    fit = cli("fit", "--texts", texts / "support.csv", "--classes", texts / "five.txt", "--model",
              "st:/no/such/model/folder", "--no-cache", "-o", texts / "idx_bad")
    line = error_line(fit)
    assert KNOWN[5] in line and "--classes" in line, line
    predict = cli("predict", index_dir, "--texts", texts / "queries.csv", "--model", "st:/no/such/model/folder",
                  "--force", "--no-cache")
    line = error_line(predict)
    assert "'oos'" in line and "--unknown-label oos" in line, line
    assert "add_classes" not in predict.stderr and "class_names" not in predict.stderr


def test_cli_errors_name_flags_not_python_calls(texts, index_dir, tmp_path):
    (tmp_path / "store").mkdir()
    missing = cli("classify", f"faiss:{tmp_path / 'store'}#nothing_here", "--index", index_dir)
    line = error_line(missing)
    assert "no such collection" in line and "dim=" not in line, line
    unknown = cli("eval", index_dir, "--eval-texts", texts / "queries.csv", "--no-cache")
    line = error_line(unknown)
    assert "--unknown-label oos" in line and "add_classes" not in line, line


def test_quiet_keeps_the_accuracy_line(index_dir, texts):
    done = cli("predict", "-q", index_dir, "--texts", texts / "in_scope.csv", "--reject-below", "none", "--no-cache")
    assert done.returncode == 0, done.stderr
    assert f"accuracy on the {len(KNOWN) * 8} labelled queries" in done.stderr
    assert "Batches" not in done.stderr and "%|" not in done.stderr  # no progress bar


def test_predict_and_eval_report_the_open_set_with_the_saved_threshold(index_dir, texts, minilm):
    index = AlignedIndex.load(index_dir)
    assert index.reject_below_ is not None
    done = cli("predict", "-q", index_dir, "--texts", texts / "queries.csv", "--unknown-label", "oos", "--no-cache")
    assert done.returncode == 0, done.stderr
    assert "saved in the index" in done.stderr
    rows = read_csv(done.stdout)
    queries = read_csv((texts / "queries.csv").read_text())
    x = minilm.embed_texts([q["text"] for q in queries])
    scores = index.score_samples(x)
    assert [r["class_name"] == "unknown" for r in rows] == list(scores < index.reject_below_)
    truth = np.array([-1 if q["label"] == "oos" else sorted(KNOWN).index(q["label"]) for q in queries])
    expected = open_set_metrics(truth, index.label_space_.lookup(index.predict(x)), scores, index.reject_below_)
    report = [line for line in done.stderr.splitlines() if line.startswith("open set")]
    assert len(report) == 1, done.stderr
    for words, key in (("in-scope accuracy", "in_scope_accuracy"), ("out-of-scope recall", "oos_recall"),
                       ("precision", "oos_precision"), ("macro-F1", "macro_f1")):
        assert f"{words} {100 * expected[key]:.1f}%" in report[0], report[0]
    assert f"AUROC {expected['auroc']:.3f}" in report[0]
    assert expected["auroc"] > 0.8 and expected["oos_recall"] > 0.5  # measured 0.93 and 0.79 when written

    evaluated = cli("eval", index_dir, "--eval-texts", texts / "queries.csv", "--unknown-label", "oos", "--no-cache")
    assert evaluated.returncode == 0, evaluated.stderr
    assert report[0] in evaluated.stdout
    assert f"{len(KNOWN) * 8} eval rows in scope, {len(OUT_OF_SCOPE) * 8} out of scope" in evaluated.stdout


def test_calibration_objectives_order_the_thresholds(index_dir, texts, minilm):
    """A higher target out-of-scope recall never lowers τ; a lower accept rate never lowers it either."""
    index = AlignedIndex.load(index_dir)
    rows = read_csv((texts / "calibration.csv").read_text())
    x, y = minilm.embed_texts([r["text"] for r in rows]), np.array([r["label"] for r in rows], dtype=object)
    taus = [index.rejection_threshold(x, y, unknown_label="oos", objective="oos-recall", oos_recall=r)
            for r in (0.5, 0.8, 1.0)]
    assert taus == sorted(taus)
    known = index.score_samples(x)[y != "oos"]
    for rate in (0.5, 0.9):
        tau = index.rejection_threshold(x, y, unknown_label="oos", accept_rate=rate)
        assert np.mean(known >= tau) >= rate
