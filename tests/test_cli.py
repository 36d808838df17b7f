"""The `lfa-index` command: help, fit -> predict -> search from files, eval, report, bad inputs, demo."""

from __future__ import annotations

import concurrent.futures
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lfa_index import AlignedCorpus, AlignedIndex, cli
from lfa_index.adapters import OpenAIEmbeddingSource, make_encoder
from lfa_index.adapters.base import BaseSource
from lfa_index.adapters.images import embed_image_items
from lfa_index.cli import inputs as cli_inputs

COMMANDS = ("fit", "predict", "classify", "search", "eval", "report", "demo")
N_CLASSES, DIM = 5, 16
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
REPO = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("single_threaded")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """Run the command in-process; returns (exit status, stdout, stderr)."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_error(code: int, err: str, *needles: str) -> None:
    """Exit 1 with exactly one `lfa-index: error:` line on stderr, the last (notes may come before), no traceback."""
    lines = err.strip().splitlines()
    assert code == 1, err
    assert lines and lines[-1].startswith("lfa-index: error: "), err
    assert sum(line.startswith("lfa-index: error: ") for line in lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[-1], lines[-1]


def read_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.fixture(scope="module")
def problem():
    from synthetic import planted_gap_problem

    return planted_gap_problem(n_classes=N_CLASSES, shots=6, d=DIM, n_test=8, seed=1)


@pytest.fixture
def files(tmp_path, problem):
    """Support / eval / pool embedding files with class-name labels, prototypes and a class list."""
    X, y, P, X_test, y_test = problem
    names = np.array([f"class {i}" for i in range(N_CLASSES)])
    np.savez(tmp_path / "support.npz", embeddings=X, labels=names[y])
    np.savez(tmp_path / "eval.npz", embeddings=X_test, labels=names[y_test])
    np.savez(tmp_path / "pool.npz", embeddings=np.concatenate([X, X_test]), labels=names[np.concatenate([y, y_test])])
    np.save(tmp_path / "support_int.npy", X)
    np.save(tmp_path / "labels_int.npy", y)
    np.save(tmp_path / "prototypes.npy", P)
    (tmp_path / "classes.txt").write_text("\n".join(names) + "\n")
    return tmp_path


@pytest.fixture
def index_dir(files, capsys):
    code, _, err = run(capsys, "fit", "-q", "--support", files / "support.npz",
                       "--prototypes", files / "prototypes.npy", "--classes", files / "classes.txt",
                       "--steps", 10, "--device", "cpu", "-o", files / "idx")
    assert code == 0, err
    return files / "idx"


# ----------------------------------------------------------------------------- help
@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_help(capsys, command):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert out.startswith(f"usage: lfa-index {command}")
    assert "-q, --quiet" in out


def test_top_level_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert f"    {command} " in out


def test_no_subcommand_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "usage: lfa-index" in capsys.readouterr().err


# ----------------------------------------------------------------------------- round trip
def test_fit_predict_search_round_trip_from_files(files, index_dir, capsys, problem):
    _, _, _, X_test, y_test = problem
    saved = AlignedIndex.load(index_dir)
    assert list(saved.classes_) == [f"class {i}" for i in range(N_CLASSES)]

    code, out, err = run(capsys, "predict", index_dir, "--queries", files / "eval.npz")
    assert code == 0, err
    rows = read_csv(out)
    assert [r["query"] for r in rows] == [str(i) for i in range(len(X_test))]
    assert [r["label"] for r in rows] == list(saved.predict(X_test))
    accuracy = np.mean(saved.predict(X_test) == np.array([f"class {i}" for i in y_test]))
    assert accuracy > 0.6
    assert f"accuracy on the {len(X_test)} labelled queries: {100 * accuracy:.1f}%" in err

    code, out, err = run(capsys, "search", index_dir, "--queries", files / "eval.npz", "-k", 3)
    assert code == 0, err
    rows = read_csv(out)
    scores, labels = saved.search(X_test, k=3)
    assert len(rows) == 3 * len(X_test)
    assert [r["label"] for r in rows] == list(labels.ravel())
    np.testing.assert_allclose([float(r["score"]) for r in rows], scores.ravel(), atol=1e-5)


def test_predict_with_integer_labels_names_the_classes_and_writes_a_file(files, capsys):
    code, _, err = run(capsys, "fit", "-q", "--support", files / "support_int.npy",
                       "--labels", files / "labels_int.npy", "--prototypes", files / "prototypes.npy",
                       "--classes", files / "classes.txt", "--steps", 5, "--device", "cpu", "-o", files / "idx_int")
    assert code == 0, err
    code, out, err = run(capsys, "predict", "-q", files / "idx_int", "--queries", files / "eval.npz", "--top-k", 2,
                         "-o", files / "pred.csv")
    assert code == 0 and out == "", err
    rows = read_csv((files / "pred.csv").read_text())
    assert [r["rank"] for r in rows[:2]] == ["1", "2"]
    assert all(r["class_name"] == f"class {r['label']}" for r in rows)


def test_reject_below_marks_queries_whose_open_set_score_is_below_it_unknown(index_dir, files, capsys, problem):
    scores = AlignedIndex.load(index_dir).score_samples(problem[3])
    tau = float(np.median(scores))
    code, out, _ = run(capsys, "predict", index_dir, "--queries", files / "eval.npz", "--reject-below", tau)
    assert code == 0
    rows = read_csv(out)
    np.testing.assert_allclose([float(r["open_set_score"]) for r in rows], scores, rtol=1e-5, atol=1e-5)
    assert [r["class_name"] == "unknown" for r in rows] == list(scores < tau)


def test_search_corpus_finds_each_corpus_row_first(files, index_dir, capsys, problem):
    _, _, _, X_test, _ = problem
    np.save(files / "corpus.npy", X_test)
    code, out, err = run(capsys, "search", index_dir, "--queries", files / "eval.npz",
                         "--corpus", files / "corpus.npy", "-k", 2)
    assert code == 0, err
    rows = read_csv(out)
    firsts = [r for r in rows if r["rank"] == "1"]
    assert [int(r["id"]) for r in firsts] == list(range(len(X_test)))
    assert all(float(r["score"]) > 0.999 for r in firsts)


def test_fit_with_a_corpus_saves_it_for_search(files, capsys, problem):
    _, _, _, X_test, _ = problem
    np.save(files / "corpus.npy", X_test)
    code, _, err = run(capsys, "fit", "-q", "--support", files / "support.npz",
                       "--prototypes", files / "prototypes.npy", "--classes", files / "classes.txt",
                       "--steps", 5, "--device", "cpu", "--corpus", files / "corpus.npy", "-o", files / "idx_corpus")
    assert code == 0, err
    saved = AlignedCorpus.load(files / "idx_corpus.corpus")  # beside the index, which holds no corpus itself
    assert saved.ntotal == len(X_test) and "corpus.faiss" not in str(sorted((files / "idx_corpus").rglob("*")))
    code, out, _ = run(capsys, "search", files / "idx_corpus", "--queries", files / "eval.npz",
                       "--target", "corpus", "-k", 1)
    assert code == 0
    assert [int(r["id"]) for r in read_csv(out)] == list(range(len(X_test)))
    # a refit without --corpus keeps the earlier corpus as it was, and says so
    code, _, err = run(capsys, "fit", "--support", files / "support.npz", "--prototypes", files / "prototypes.npy",
                       "--classes", files / "classes.txt", "--steps", 5, "--device", "cpu", "-o", files / "idx_corpus")
    assert code == 0 and "aligned corpus of an earlier fit, is kept" in err
    assert AlignedCorpus.load(files / "idx_corpus.corpus").ntotal == len(X_test)


def test_search_corpus_without_a_corpus_is_a_clean_error(index_dir, files, capsys):
    code, _, err = run(capsys, "search", index_dir, "--queries", files / "eval.npz", "--target", "corpus")
    assert_clean_error(code, err, "no aligned corpus", "--corpus")


# ----------------------------------------------------------------------------- eval
def test_eval_of_an_index_matches_its_predictions(index_dir, files, capsys, problem):
    _, _, _, X_test, y_test = problem
    code, out, err = run(capsys, "eval", "-q", index_dir, "--eval", files / "eval.npz", "--json", files / "eval.json")
    assert code == 0, err
    header = out.splitlines()[2].split()
    assert header[:2] == ["shots", "zero-shot"] and header[-1] == "LFA"
    saved = AlignedIndex.load(index_dir)
    expected = np.mean(saved.predict(X_test) == np.array([f"class {i}" for i in y_test]))
    result = json.loads((files / "eval.json").read_text())
    (shots,) = result["shots"]
    assert shots == 6
    assert result["accuracy"][str(shots)]["lfa"]["mean"] == pytest.approx(expected)
    assert out.splitlines()[4].split()[-1] == f"{100 * expected:.1f}"


def test_eval_draws_k_shot_support_sets_from_a_pool(files, capsys):
    code, out, err = run(capsys, "eval", "-q", "--pool", files / "pool.npz", "--eval", files / "eval.npz",
                         "--prototypes", files / "prototypes.npy", "--classes", files / "classes.txt",
                         "--shots", 1, 3, "--seeds", 0, 1, "--steps", 5, "--device", "cpu")
    assert code == 0, err
    lines = out.splitlines()
    assert "seeds 0, 1" in lines[0]
    assert [line.split()[0] for line in lines[4:]] == ["1", "3"]
    assert lines[4].count("±") == 5  # zero-shot, class mean, kNN, linear probe, LFA


def test_eval_leaves_zero_shot_out_on_request(index_dir, files, capsys):
    code, out, _ = run(capsys, "eval", "-q", index_dir, "--eval", files / "eval.npz", "--no-zero-shot")
    assert code == 0
    assert "zero-shot" not in out.splitlines()[2]


# ----------------------------------------------------------------------------- report
def test_report_writes_pngs_and_an_html_page(index_dir, files, capsys):
    out_dir = files / "report"
    code, _, err = run(capsys, "report", "-q", index_dir, "--eval", files / "eval.npz", "-o", out_dir)
    assert code == 0, err
    pngs = sorted(p.name for p in out_dir.glob("*.png"))
    assert pngs == ["idx_hubness.png", "idx_modality_gap.png", "idx_per_class.png", "idx_similarity.png"]
    html = (out_dir / "index.html").read_text()
    for name in pngs:
        assert (out_dir / name).read_bytes().startswith(PNG_SIGNATURE)
        assert f'src="{name}"' in html


def test_report_without_eval_rows_skips_the_per_class_figure(index_dir, files, capsys):
    out_dir = files / "report_support"
    code, _, err = run(capsys, "report", "-q", index_dir, "-o", out_dir)
    assert code == 0, err
    pngs = sorted(p.name for p in out_dir.glob("*.png"))
    assert pngs == ["idx_hubness.png", "idx_modality_gap.png", "idx_similarity.png"]


# ----------------------------------------------------------------------------- bad inputs
def test_missing_api_key_fails_cleanly_before_any_request(files, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr(OpenAIEmbeddingSource, "_client", lambda self, key: pytest.fail("a client was created"))
    code, _, err = run(capsys, "fit", "-q", "--support", files / "support.npz", "--classes", files / "classes.txt",
                       "--text-model", "openai:text-embedding-3-small", "--no-cache", "-o", files / "idx_openai")
    assert_clean_error(code, err, "OPENAI_API_KEY")
    assert not (files / "idx_openai").exists()


def test_empty_class_list_is_a_clean_error(files, capsys):
    (files / "empty.txt").write_text("\n  \n")
    code, _, err = run(capsys, "fit", "-q", "--support", files / "support.npz",
                       "--prototypes", files / "prototypes.npy", "--classes", files / "empty.txt",
                       "-o", files / "idx_empty")
    assert_clean_error(code, err, "lists no class names")


def test_unknown_encoder_lists_the_accepted_forms(files, capsys):
    code, _, err = run(capsys, "fit", "-q", "--support", files / "support.npz", "--classes", files / "classes.txt",
                       "--text-model", "word2vec:google", "-o", files / "idx_bad")
    assert_clean_error(code, err, "unknown encoder 'word2vec:google'", "minilm", "openai:MODEL")


def test_missing_files_and_indexes_are_clean_errors(files, capsys):
    code, _, err = run(capsys, "fit", "-q", "--support", files / "nope.npz", "--prototypes", files / "prototypes.npy",
                       "-o", files / "idx_nope")
    assert_clean_error(code, err, "nope.npz")
    code, _, err = run(capsys, "predict", "-q", files / "no_index", "--queries", files / "eval.npz")
    assert_clean_error(code, err, "no index at", "lfa-index fit")


def test_bad_query_rows_are_clean_errors(index_dir, files, capsys, problem):
    _, _, _, X_test, _ = problem
    bad = X_test.copy()
    bad[2, 0] = np.nan
    np.save(files / "nan.npy", bad)
    code, _, err = run(capsys, "predict", "-q", index_dir, "--queries", files / "nan.npy")
    assert_clean_error(code, err, "NaN")
    np.save(files / "narrow.npy", X_test[:, :8])
    code, _, err = run(capsys, "predict", "-q", index_dir, "--queries", files / "narrow.npy")
    assert_clean_error(code, err, "8 dimensions")


def test_giving_the_support_set_twice_is_a_clean_error(files, capsys):
    code, _, err = run(capsys, "fit", "-q", "--support", files / "support.npz", "--texts", files / "t.csv",
                       "--prototypes", files / "prototypes.npy", "-o", files / "idx_twice")
    assert_clean_error(code, err, "one way only", "--support", "--texts")


def test_integer_labels_without_class_names_cannot_embed_names(files, capsys):
    code, _, err = run(capsys, "fit", "-q", "--support", files / "support_int.npy",
                       "--labels", files / "labels_int.npy", "--text-model", "minilm", "-o", files / "idx_noname")
    assert_clean_error(code, err, "--classes")


def test_raw_inputs_without_an_encoder_fail_before_any_work(files, capsys):
    (files / "t.csv").write_text("text,label\nhello,a\nbye,b\n")
    code, _, err = run(capsys, "fit", "-q", "--texts", files / "t.csv", "--text-model", "openai:text-embedding-3-small",
                       "-o", files / "idx_nomodel")
    assert_clean_error(code, err, "embedding texts needs an encoder", "--model SPEC")


def _bad_input_cases(index_dir, files):
    """(name, argv, needle) for every kind of unreadable input file or option value."""
    bad = files / "bad"
    bad.mkdir()
    for name, content in {
        "empty.npy": b"", "empty.npz": b"", "empty.safetensors": b"", "garbage.safetensors": b"\xff" * 64,
        "empty.parquet": b"", "garbage.parquet": b"PAR1 not a parquet file PAR1", "broken.json": b"[1, 2",
        "empty.json": b"", "latin1.txt": "caf\u00e9\n".encode("latin-1"),
        "latin1.csv": "text,label\ncaf\u00e9,a\n".encode("latin-1"),
    }.items():
        (bad / name).write_bytes(content)
    queries = files / "support_int.npy"
    fit = ["fit", "--support", files / "support.npz", "--prototypes", files / "prototypes.npy", "--steps", 2]
    cases = [
        (f"queries {name}", ["predict", index_dir, "--queries", bad / name], name)
        for name in ("empty.npy", "empty.npz", "empty.safetensors", "garbage.safetensors", "empty.parquet",
                     "garbage.parquet")
    ]
    cases += [
        ("malformed labels JSON", ["predict", index_dir, "--queries", queries, "--labels", bad / "broken.json"],
         "broken.json"),
        ("empty labels JSON", ["predict", index_dir, "--queries", queries, "--labels", bad / "empty.json"],
         "empty.json"),
        ("non-UTF-8 labels", ["predict", index_dir, "--queries", queries, "--labels", bad / "latin1.txt"], "UTF-8"),
        ("non-UTF-8 classes", [*fit, "--classes", bad / "latin1.txt", "-o", files / "idx_latin"], "UTF-8"),
        ("non-UTF-8 texts", ["predict", index_dir, "--texts", bad / "latin1.csv", "--model", "minilm"], "UTF-8"),
        ("non-UTF-8 prompt file", ["search", index_dir, "--prompt-file", bad / "latin1.txt"], "UTF-8"),
    ]
    cases += [
        (f"--reject-below {tau}", ["predict", index_dir, "--queries", queries, "--reject-below", tau], "--reject-below")
        for tau in ("abc", "nan")
    ]
    return cases


def test_unreadable_inputs_print_one_error_line_through_the_real_command(index_dir, files):
    """Through ``python -m lfa_index.cli`` (what the ``lfa-index`` script runs): exit 1, one line, no traceback."""
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))

    def command(case):
        name, argv, needle = case
        done = subprocess.run(
            [sys.executable, "-m", "lfa_index.cli", *map(str, argv), "-q", "--device", "cpu", "--no-cache"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
        )
        return name, done.returncode, done.stderr, needle

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(command, _bad_input_cases(index_dir, files)))
    failures = []
    for name, code, err, needle in results:
        lines = err.strip().splitlines()
        clean = (code == 1 and len(lines) == 1 and lines[0].startswith("lfa-index: error: ") and needle in lines[0])
        if not clean:
            failures.append(f"{name}: exit {code}, stderr:\n{err[-1500:]}")
    assert not failures, "\n\n".join(failures)


def test_a_threshold_that_is_not_a_finite_number_is_refused(index_dir, files, capsys):
    for tau in ("nan", "inf", "cosine"):
        code, _, err = run(capsys, "predict", "-q", index_dir, "--queries", files / "eval.npz", "--reject-below", tau)
        assert_clean_error(code, err, "--reject-below", "number")


def test_any_finite_threshold_is_a_score_threshold_and_extreme_ones_reject_all_or_none(index_dir, files, capsys):
    """τ is on the scale of score_samples (standardised, unbounded), not an aligned cosine in [-1, 1]."""
    for tau, unknown in (("1e6", True), ("-1e6", False)):
        code, out, err = run(capsys, "predict", index_dir, "--queries", files / "eval.npz", f"--reject-below={tau}")
        assert code == 0, err
        assert {r["class_name"] == "unknown" for r in read_csv(out)} == {unknown}


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", "--no-such-flag"])
    assert exit_info.value.code == 2


class TinyImageSource(BaseSource):
    """A 12-d image embedding (2 x 2 mean colours) that runs through the adapters' real image path."""

    name = "tiny-images"
    dim = 12

    def __init__(self, strict: bool = False):
        self.batch_size, self.cache_dir, self.progress, self.strict = 4, None, False, strict

    def _identity(self) -> str:
        return "tiny-images"

    def embed_images(self, images):
        rows, self.skipped_ = embed_image_items(
            self, images, self._encode, modality="image", item_shape=lambda: (self.dim,), extra="clip"
        )
        return rows

    def _encode(self, images):
        return np.stack([np.asarray(im.resize((2, 2)), dtype=np.float32).ravel() / 255 + 0.05 for im in images])


@pytest.fixture
def image_folder(tmp_path, monkeypatch):
    """DIR/<colour>/<3 images> plus one unreadable file, and a `tiny` encoder spec for them."""
    from PIL import Image

    colours = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (20, 40, 230)}
    rng = np.random.default_rng(0)
    for name, rgb in colours.items():
        (tmp_path / "images" / name).mkdir(parents=True)
        for i in range(3):
            pixels = np.clip(np.array(rgb) + rng.integers(-20, 20, (8, 8, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(tmp_path / "images" / name / f"{i}.png")
    (tmp_path / "images" / "red" / "broken.jpg").write_bytes(b"this is not a jpeg")
    prototypes = np.stack([np.tile(np.array(rgb, dtype=np.float32) / 255 + 0.05, 4) for rgb in colours.values()])
    np.save(tmp_path / "colours.npy", prototypes[np.argsort(list(colours))])  # folder names sort: blue, green, red
    original = cli_inputs.make_encoder
    monkeypatch.setattr(cli_inputs, "make_encoder", lambda spec, **kw: TinyImageSource(kw.get("strict", False))
                        if spec == "tiny" else original(spec, **kw))
    return tmp_path


def test_unreadable_images_are_skipped_with_a_warning_and_a_count(image_folder, capsys):
    code, _, err = run(capsys, "fit", "-q", "--images", image_folder / "images", "--model", "tiny", "--prototypes",
                       image_folder / "colours.npy", "--steps", 5, "--device", "cpu", "-o", image_folder / "idx")
    assert code == 0, err
    assert "lfa-index: warning: skipped 1 of 10 unreadable image(s)" in err
    assert "broken.jpg" in err and "--strict" in err
    index = AlignedIndex.load(image_folder / "idx")
    assert len(index.support_labels_) == 9
    assert list(index.classes_) == ["blue", "green", "red"]
    assert np.bincount(index.support_labels_).tolist() == [3, 3, 3]


def test_strict_stops_at_an_unreadable_image(image_folder, capsys):
    code, _, err = run(capsys, "fit", "-q", "--images", image_folder / "images", "--model", "tiny", "--strict",
                       "--prototypes", image_folder / "colours.npy", "-o", image_folder / "idx_strict")
    assert_clean_error(code, err, "broken.jpg", "drop --strict")
    assert not (image_folder / "idx_strict").exists()


# ----------------------------------------------------------------------------- real text model (slow)
@pytest.mark.slow
def test_texts_longer_than_the_model_limit_are_truncated_and_reported(tmp_path, capsys):
    rows = [("my card has not arrived yet", "card arrival"), ("when will my new card come", "card arrival"),
            ("I want to top up with cash", "top up"), ("how do I add money to my account", "top up"),
            ("money " * 400, "top up")]
    with open(tmp_path / "texts.csv", "w", newline="") as f:
        csv.writer(f).writerows([("text", "label"), *rows])
    code, _, err = run(capsys, "fit", "-q", "--texts", tmp_path / "texts.csv", "--model", "minilm", "--steps", 5,
                       "--device", "cpu", "--cache-dir", tmp_path / "cache", "-o", tmp_path / "idx")
    assert code == 0, err
    warning = [line for line in err.splitlines() if line.startswith("lfa-index: warning:")]
    assert len(warning) == 1 and "truncated" in warning[0] and "256 tokens" in warning[0], err
    code, out, err = run(capsys, "predict", "-q", tmp_path / "idx", "--text", "where is my card", "--model", "minilm",
                         "--cache-dir", tmp_path / "cache")
    assert code == 0, err
    assert read_csv(out)[0]["label"] == "card arrival"


@pytest.mark.slow
def test_prompt_queries_find_corpus_texts_through_the_aligned_index(tmp_path, capsys):
    rows = [("my card has not arrived yet", "card arrival"), ("when will my new card come", "card arrival"),
            ("I want to top up with cash", "top up"), ("how do I add money to my account", "top up")]
    with open(tmp_path / "texts.csv", "w", newline="") as f:
        csv.writer(f).writerows([("text", "label"), *rows])
    corpus = ["is it possible to top up my balance by bank transfer", "my card still has not been delivered"]
    (tmp_path / "corpus.txt").write_text("\n".join(corpus) + "\n")
    common = ["--model", "minilm", "--cache-dir", tmp_path / "cache", "--device", "cpu"]
    code, _, err = run(capsys, "fit", "-q", "--texts", tmp_path / "texts.csv", "--steps", 5, *common,
                       "-o", tmp_path / "idx")
    assert code == 0, err
    source = make_encoder("minilm", cache_dir=tmp_path / "cache", progress=False, device="cpu")
    np.save(tmp_path / "corpus.npy", source.embed_texts(corpus))
    code, out, err = run(capsys, "search", "-q", tmp_path / "idx", "--prompt", "top up", "--prompt", "card arrival",
                         "--text-model", "minilm", "--corpus", tmp_path / "corpus.npy", "-k", 1,
                         "--cache-dir", tmp_path / "cache")
    assert code == 0, err
    assert [(r["query"], r["id"]) for r in read_csv(out)] == [("top up", "0"), ("card arrival", "1")]


@pytest.mark.slow
def test_a_hub_model_that_is_not_on_disk_says_it_needs_the_network(files, capsys, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    code, _, err = run(capsys, "fit", "-q", "--offline", "--support", files / "support.npz", "--classes",
                       files / "classes.txt", "--text-model", "st:no-such-org/no-such-model", "--no-cache",
                       "-o", files / "idx_hub")
    assert_clean_error(code, err, "no-such-org/no-such-model", "network", "local folder")
    assert "HF_HUB_OFFLINE" not in os.environ
    code, _, err = run(capsys, "fit", "-q", "--support", files / "support.npz", "--classes", files / "classes.txt",
                       "--text-model", "st:/no/such/model/folder", "--no-cache", "-o", files / "idx_hub")
    assert_clean_error(code, err, "No model folder at /no/such/model/folder")


@pytest.mark.slow
def test_quick_demo_runs_end_to_end_and_prints_what_it_saved(tmp_path, capsys):
    from lfa_index.data import find_shared_data

    out_dir = tmp_path / "report"
    code, out, err = run(capsys, "demo", "--quick", "-q", "--cache-dir", tmp_path / "cache", "-o", out_dir)
    assert code == 0, err
    results = json.loads((out_dir / "results.json").read_text())
    banking = results["results"][0]
    assert banking["task"] == "banking77" and banking["n_classes"] == 20 and banking["shots"] == [1, 4]
    # the printed table is the saved one
    printed = out.split("[1] Banking77")[1].split("\n\n")[0].splitlines()
    row_4 = next(line.split() for line in printed if line.split()[:1] == ["4"])
    saved = banking["accuracy"]["4"]
    methods = ("zero_shot", "nearest_class_mean", "knn", "linear_probe", "lfa")
    expected = [f"{100 * saved[m]['mean']:.1f}" for m in methods]
    assert row_4[1:] == expected
    assert saved["lfa"]["mean"] > 0.5  # 20 intents: chance is 5%
    assert (out_dir / "banking77_modality_gap.png").read_bytes().startswith(PNG_SIGNATURE)
    assert "banking77_per_class.png" in (out_dir / "index.html").read_text()
    has_images = find_shared_data() is not None
    assert (out_dir / "dtd_hubness.png").exists() == has_images
    assert ("[2] DTD" in out) == has_images
    assert any(p.suffix == ".safetensors" for p in (tmp_path / "cache").rglob("*"))


@pytest.mark.vision
def test_image_folder_through_a_real_backbone_skips_unreadable_images(image_folder, capsys):
    rng = np.random.default_rng(0)
    np.save(image_folder / "prototypes16.npy", rng.standard_normal((3, 16)).astype(np.float32))
    code, _, err = run(capsys, "fit", "-q", "--images", image_folder / "images", "--model", "torchvision:mobilenet_v2",
                       "--prototypes", image_folder / "prototypes16.npy", "--steps", 5, "--device", "cpu",
                       "--cache-dir", image_folder / "cache", "-o", image_folder / "idx")
    assert code == 0, err
    assert "random weights" in err and "skipped 1 of 10 unreadable image(s)" in err
    assert AlignedIndex.load(image_folder / "idx").n_features_in_ == 1280
    code, out, err = run(capsys, "predict", "-q", image_folder / "idx", "--images", image_folder / "images",
                         "--model", "torchvision:mobilenet_v2", "--cache-dir", image_folder / "cache")
    assert code == 0, err
    rows = read_csv(out)
    assert len(rows) == 9 and not any(r["query"].endswith("broken.jpg") for r in rows)
    assert "skipped 1 of 10" in err


def test_fit_ends_with_the_summary_of_its_choices_and_saves_it(files, capsys):
    code, _, err = run(capsys, "fit", "--support", files / "support_int.npy", "--labels", files / "labels_int.npy",
                       "--prototypes", files / "prototypes.npy", "--device", "cpu", "-o", files / "idx_summary")
    assert code == 0, err
    summary = AlignedIndex.load(files / "idx_summary").lfa_.summary_
    assert summary.startswith("LFA fit: β=") and "steps" in summary and summary.endswith(" s")
    assert summary in err


# ----------------------------------------------------------------------------- open set and checks (fast)
def test_calibrate_on_embeddings_with_out_of_scope_rows_saves_the_threshold(files, capsys, problem):
    _, _, _, X_test, y_test = problem
    labels = np.array([f"class {i}" if i < N_CLASSES - 1 else "oos" for i in y_test])
    np.savez(files / "val.npz", embeddings=X_test, labels=labels)
    keep = np.load(files / "support.npz")["labels"] != f"class {N_CLASSES - 1}"
    support = np.load(files / "support.npz")
    np.savez(files / "support4.npz", embeddings=support["embeddings"][keep], labels=support["labels"][keep])
    np.save(files / "prototypes4.npy", np.load(files / "prototypes.npy")[: N_CLASSES - 1])
    code, _, err = run(capsys, "fit", "--support", files / "support4.npz", "--prototypes", files / "prototypes4.npy",
                       "--steps", 10, "--device", "cpu", "--calibrate-on", files / "val.npz", "--unknown-label", "oos",
                       "--objective", "oos-recall", "--oos-recall", "1", "-o", files / "idx_cal")
    assert code == 0, err
    index = AlignedIndex.load(files / "idx_cal")
    assert index.reject_below_ is not None and "--objective oos-recall" in err
    assert (index.score_samples(X_test[labels == "oos"]) < index.reject_below_).all()  # every oos row rejected
    code, out, err = run(capsys, "predict", files / "idx_cal", "--queries", files / "val.npz", "--unknown-label", "oos")
    assert code == 0, err
    assert "out-of-scope recall 100.0%" in err and "saved in the index" in err
    assert all(r["class_name"] == "unknown" for r, lab in zip(read_csv(out), labels) if lab == "oos")


@pytest.mark.parametrize("extra, needle", [
    (["--objective", "macro-f1", "--calibrate-on", "VAL"], "--unknown-label"),
    (["--unknown-label", "oos"], "--calibrate-on"),
    (["--calibrate-on", "VAL", "--accept-rate", "1.5"], "--accept-rate"),
])
def test_calibration_options_are_checked_before_any_work(files, capsys, extra, needle):
    np.savez(files / "val.npz", embeddings=np.load(files / "support_int.npy"), labels=np.load(files / "labels_int.npy"))
    extra = [str(files / "val.npz") if a == "VAL" else a for a in extra]
    code, _, err = run(capsys, "fit", "--support", files / "support.npz", "--prototypes", files / "prototypes.npy",
                       *extra, "-o", files / "idx_never")
    assert_clean_error(code, err, needle)
    assert not (files / "idx_never").exists()


def test_a_prototype_file_of_another_length_than_the_classes_names_both_flags(files, capsys):
    np.save(files / "short.npy", np.load(files / "prototypes.npy")[:-1])
    code, _, err = run(capsys, "fit", "--support", files / "support.npz", "--prototypes", files / "short.npy",
                       "--classes", files / "classes.txt", "-o", files / "idx_short")
    assert_clean_error(code, err, "--classes", "--prototypes", f"{N_CLASSES - 1} rows")


def test_eval_without_an_index_refuses_open_set_options(files, capsys):
    code, _, err = run(capsys, "eval", "--pool", files / "pool.npz", "--eval", files / "eval.npz",
                       "--prototypes", files / "prototypes.npy", "--classes", files / "classes.txt",
                       "--unknown-label", "oos")
    assert_clean_error(code, err, "INDEX")
