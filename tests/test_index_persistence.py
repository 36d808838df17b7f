"""AlignedIndex.save / load: identical answers, safetensors + JSON, checksums, atomic writes (AlignedCorpus:
test_corpus.py)."""

from __future__ import annotations

import concurrent.futures
import errno
import json
import multiprocessing
import os
import pickle
import signal
import tempfile
import time

import faiss
import numpy as np
import pytest
from properties import data_dir

import lfa_index.persistence as persistence
import lfa_index.persistence.writer as writer
from lfa_index import LFA, AlignedIndex, IndexFormatError, IndexPathError, IndexPermissionError, IndexVersionError
from lfa_index.persistence.layout import file_sha256

OPTIONS = dict(beta=0.5, steps=5, device="cpu", random_state=0)
NAMES = [f"class {i}" for i in range(10)]


pytestmark = pytest.mark.usefixtures("single_threaded")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    text = rng.standard_normal((12, 24)).astype(np.float32)
    mix = rng.standard_normal((24, 40)).astype(np.float32)
    labels = np.repeat(np.arange(10), 3)
    support = (text[labels] @ mix + rng.standard_normal((30, 40))).astype(np.float32)
    queries = (text[rng.integers(0, 12, 200)] @ mix + rng.standard_normal((200, 40))).astype(np.float32)
    return support, labels, text, queries


@pytest.fixture(scope="module")
def index(data):
    """Named classes, an image-side projection (40 -> 24) and two added classes."""
    support, labels, text, _ = data
    ix = AlignedIndex(lfa=LFA(**OPTIONS))
    ix.fit(support, np.array(NAMES)[labels], text[:10], class_names=NAMES)
    return ix.add_classes(text[10:], class_names=["new a", "new b"])


def answers(ix, data):
    _, _, text, queries = data
    return {
        "predict": ix.predict(queries),
        "reject": ix.predict(queries, reject_below=0.2),
        "search": ix.search(queries, 4),
        "decision": ix.decision_function(queries),
        "proba": ix.predict_proba(queries),
        "text": ix.transform_text(text),
        "prototypes": ix.aligned_prototypes(),
    }


def assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        left = a[key] if isinstance(a[key], tuple) else (a[key],)
        right = b[key] if isinstance(b[key], tuple) else (b[key],)
        for x, y in zip(left, right):
            np.testing.assert_array_equal(x, y, err_msg=key)


def test_save_then_load_gives_identical_answers(index, data, tmp_path):
    index.save(tmp_path / "ix")
    loaded = AlignedIndex.load(tmp_path / "ix")
    assert_same(answers(index, data), answers(loaded, data))
    params = [{k: v for k, v in ix.get_params().items() if k != "lfa"} for ix in (loaded, index)]  # lfa: two LFAs
    assert params[0] == params[1]
    assert list(loaded.classes_) == NAMES + ["new a", "new b"]


def test_the_papers_projection_of_narrower_image_rows_up_round_trips(data, tmp_path):
    """``LFA.paper()`` projects 16-d image rows up into the 24-d text width; a saved index keeps that."""
    support, labels, text, queries = data
    ix = AlignedIndex(lfa=LFA.paper(steps=5, device="cpu", random_state=0))
    ix.fit(support[:, :16], labels, text[:10])
    assert (ix.lfa_.projection_kind_, ix.lfa_.projection_side_) == ("to_text", "image")
    ix.save(tmp_path / "ix")
    loaded = AlignedIndex.load(tmp_path / "ix")
    assert loaded.lfa_.projection_kind_ == "to_text"
    np.testing.assert_array_equal(loaded.decision_function(queries[:, :16]), ix.decision_function(queries[:, :16]))


def test_directory_holds_safetensors_and_json_files_with_checksums(index, tmp_path):
    path = index.save(tmp_path / "ix")
    manifest = json.loads((path / "manifest.json").read_text())
    assert sorted(p.name for p in path.iterdir()) == [".lfa-index.lock", manifest["data"], "manifest.json"]
    files = sorted(p.name for p in data_dir(path).iterdir())
    assert files == ["arrays.safetensors", "params.json"]
    assert manifest["format"] == "lfa-index" and manifest["format_version"] == persistence.FORMAT_VERSION
    assert set(manifest["files"]) == {"arrays.safetensors", "params.json"}
    assert all(len(entry["sha256"]) == 64 for entry in manifest["files"].values())
    assert json.loads((data_dir(path) / "params.json").read_text())["class_names"] == NAMES + ["new a", "new b"]


def test_load_never_unpickles(index, tmp_path, monkeypatch):
    index.save(tmp_path / "ix")

    def refuse(*args, **kwargs):
        raise AssertionError("load() must not unpickle anything")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    AlignedIndex.load(tmp_path / "ix")


def test_partial_fit_after_load_continues_as_before(data, tmp_path):
    support, labels, text, queries = data
    original = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support[::2], labels[::2], text)
    original.save(tmp_path / "ix")
    loaded = AlignedIndex.load(tmp_path / "ix")
    original.partial_fit(support[1::2], labels[1::2])
    loaded.partial_fit(support[1::2], labels[1::2])
    np.testing.assert_array_equal(loaded.lfa_.W_, original.lfa_.W_)
    np.testing.assert_array_equal(loaded.predict(queries), original.predict(queries))


def test_an_index_of_integer_classes_round_trips(data, tmp_path):
    support, labels, text, queries = data
    ix = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text[:10])
    loaded = AlignedIndex.load(ix.save(tmp_path / "ix"))
    np.testing.assert_array_equal(loaded.predict(queries), ix.predict(queries))
    assert loaded.label_space_.kind == "index"


# ------------------------------------------------------------------ where save may write
def test_save_replaces_an_existing_index_and_fills_an_empty_directory(index, data, tmp_path):
    support, labels, text, queries = data
    (tmp_path / "empty").mkdir()
    index.save(tmp_path / "empty")
    other = AlignedIndex(lfa=LFA(**OPTIONS)).fit(support, labels, text[:10])
    other.save(tmp_path / "empty")
    np.testing.assert_array_equal(AlignedIndex.load(tmp_path / "empty").predict(queries), other.predict(queries))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]  # no temporary directories left


def test_save_refuses_a_non_empty_directory_that_is_not_an_index(index, tmp_path):
    target = tmp_path / "photos"
    target.mkdir()
    (target / "holiday.jpg").write_bytes(b"not an index")
    with pytest.raises(IndexPathError, match="not an lfa-index"):
        index.save(target)
    assert [p.name for p in target.iterdir()] == ["holiday.jpg"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(IndexPathError, match="is a file"):
        index.save(tmp_path / "file")


def test_a_failed_save_leaves_the_previous_index_intact(index, data, tmp_path, monkeypatch):
    path = index.save(tmp_path / "ix")
    before = (path / "manifest.json").read_bytes()

    def broken_write(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(writer, "save_file", broken_write)
    with pytest.raises(OSError, match="disk full"):
        index.save(path)
    assert (path / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ix"]
    assert len(list(path.glob("data-*"))) == 1  # the failed save's folder is gone
    monkeypatch.undo()
    assert_same(answers(AlignedIndex.load(path), data), answers(index, data))


# ------------------------------------------------------------------ what load refuses
@pytest.fixture()
def saved(index, tmp_path):
    return index.save(tmp_path / "ix")


def test_corrupted_file_is_detected(saved):
    blob = bytearray((data_dir(saved) / "arrays.safetensors").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (data_dir(saved) / "arrays.safetensors").write_bytes(bytes(blob))
    with pytest.raises(IndexFormatError, match="corrupted"):
        AlignedIndex.load(saved)


def test_truncated_file_is_detected(saved):
    blob = (data_dir(saved) / "arrays.safetensors").read_bytes()
    (data_dir(saved) / "arrays.safetensors").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(IndexFormatError, match="truncated"):
        AlignedIndex.load(saved)


def test_missing_file_is_detected(saved):
    (data_dir(saved) / "params.json").unlink()
    with pytest.raises(IndexFormatError, match="missing"):
        AlignedIndex.load(saved)


def test_foreign_directories_are_refused(tmp_path, saved):
    with pytest.raises(IndexFormatError, match="no manifest.json"):
        AlignedIndex.load(tmp_path)
    with pytest.raises(IndexFormatError, match="no index directory"):
        AlignedIndex.load(tmp_path / "nowhere")
    (saved / "manifest.json").write_text(json.dumps({"format": "something-else", "files": {}}))
    with pytest.raises(IndexFormatError, match="foreign"):
        AlignedIndex.load(saved)
    (saved / "manifest.json").write_text("{not json")
    with pytest.raises(IndexFormatError, match="corrupted"):
        AlignedIndex.load(saved)


def test_manifest_cannot_point_outside_the_directory(saved):
    manifest = json.loads((saved / "manifest.json").read_text())
    manifest["files"]["../escape.json"] = {"sha256": "0" * 64, "bytes": 1}
    (saved / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="invalid entry"):
        AlignedIndex.load(saved)


def _snapshot(path):
    """Every entry under ``path`` with its bytes (None for folders) and modification time."""
    return {p: (None if p.is_dir() else p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(path.rglob("*"))}


@pytest.mark.parametrize("version", [persistence.FORMAT_VERSION + 1, 3, 0])
def test_a_directory_of_another_format_version_is_refused_and_left_untouched(index, saved, version):
    """3: what the code before the restart of format versioning wrote; no upgrade code reads it."""
    manifest = json.loads((saved / "manifest.json").read_text())
    manifest["format_version"] = version
    (saved / "manifest.json").write_text(json.dumps(manifest))
    before = _snapshot(saved.parent)
    with pytest.raises(IndexVersionError, match=f"format version {version}.*re-fit the model and re-save it"):
        AlignedIndex.load(saved)
    with pytest.raises(IndexPathError, match="another on-disk format.*re-fit the model and re-save it"):
        index.save(saved)
    assert _snapshot(saved.parent) == before


def test_consistent_but_foreign_contents_are_refused(tmp_path):
    persistence.write_index_dir(
        tmp_path / "odd", kind="aligned-index", documents={"params.json": {"hello": 1}}, arrays={}, faiss_indexes={}
    )
    with pytest.raises(IndexFormatError, match="not written by AlignedIndex.save"):
        AlignedIndex.load(tmp_path / "odd")


def test_a_deeply_nested_manifest_is_a_format_error_not_a_recursion_error(saved):
    (saved / "manifest.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(IndexFormatError, match="nested too deeply"):
        AlignedIndex.load(saved)


def test_a_deeply_nested_part_is_a_format_error_not_a_recursion_error(tmp_path):
    persistence.write_index_dir(
        tmp_path / "ix", kind="aligned-index", documents={"params.json": {}}, arrays={}, faiss_indexes={}
    )
    part = data_dir(tmp_path / "ix") / "params.json"
    part.write_text("[" * 200_000 + "]" * 200_000)
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    manifest["files"]["params.json"] = {"sha256": file_sha256(part), "bytes": part.stat().st_size}
    (tmp_path / "ix" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexFormatError, match="could not be read"):
        AlignedIndex.load(tmp_path / "ix")


# ------------------------------------------------------------------ crashes, concurrency


def only_ours_left(path):
    """The index directory holds what its manifest names (and the lock file); nothing lies beside it."""
    manifest = json.loads((path / "manifest.json").read_text())
    assert {p.name for p in path.iterdir()} - {".lfa-index.lock"} == {"manifest.json", manifest["data"]}
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def _fitted_variant(data, seed):
    support, labels, text, _ = data
    return AlignedIndex(lfa=LFA(beta=0.5, steps=3, device="cpu", random_state=seed)).fit(support, labels, text[:10])


def _save_killed_at(step, ix, path):
    """Save ``ix`` in a forked child that SIGKILLs itself before its ``step``-th file-system call.

    Returns True when the child was killed, False when the save finished first.
    """
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            calls = [0]

            def counted(fn):
                def call(*args, **kwargs):
                    calls[0] += 1
                    if calls[0] == step:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return fn(*args, **kwargs)

                return call

            for name in ("open", "mkdir", "fsync", "replace", "rename", "unlink", "rmdir"):
                setattr(os, name, counted(getattr(os, name)))
            ix.save(path)
            os._exit(0)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0
    return False


needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="kills and races forked children (POSIX only)")


@needs_fork
def test_a_save_killed_at_any_step_leaves_the_old_or_the_new_index(data, tmp_path):
    old, new, third = (_fitted_variant(data, seed) for seed in (1, 2, 3))
    step, outcomes = 0, set()
    while True:
        step += 1
        path = tmp_path / f"run{step}" / "ix"
        old.save(path)
        killed = _save_killed_at(step, new, path)
        loaded = AlignedIndex.load(path)
        same = [np.array_equal(loaded.aligned_prototypes(), ix.aligned_prototypes()) for ix in (old, new)]
        assert any(same), f"killed at step {step}: the index is neither the old nor the new one"
        reference = old if same[0] else new
        np.testing.assert_array_equal(loaded.predict(data[3]), reference.predict(data[3]))
        outcomes.add("old" if same[0] else "new")
        if not killed:
            break
        third.save(path)  # the next save recovers: no leftovers of the killed one
        np.testing.assert_array_equal(AlignedIndex.load(path).aligned_prototypes(), third.aligned_prototypes())
        only_ours_left(path)
    assert step > 10 and outcomes == {"old", "new"}


def _stress_writer(path, writer, stop_at, errors):
    seq = 0
    try:
        while time.monotonic() < stop_at:
            seq += 1
            tag = writer * 100_000 + seq
            persistence.write_index_dir(
                path, kind="stress", documents={"params.json": {"tag": tag}},
                arrays={"arrays.safetensors": {"tag": np.full(256, tag, dtype=np.int64)}},
                faiss_indexes={"vectors.faiss": _tagged_index(tag)},
            )
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        errors.put(f"writer {writer}: {type(err).__name__}: {err}")
    errors.put(f"saves {seq}")


def _tagged_index(tag):
    index = faiss.IndexFlatIP(2)
    index.add(np.array([[tag, 1.0]], dtype=np.float32))
    return index


def _stress_reader(path, stop_at, errors):
    loads = 0
    try:
        while time.monotonic() < stop_at:
            docs, arrays, indexes = persistence.read_index_dir(path, kind="stress")
            tag = docs["params.json"]["tag"]
            assert (arrays["arrays.safetensors"]["tag"] == tag).all(), "arrays from another save"
            assert indexes["vectors.faiss"].reconstruct(0)[0] == np.float32(tag), "faiss index from another save"
            loads += 1
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        errors.put(f"reader: {type(err).__name__}: {err}")
    errors.put(f"loads {loads}")


@needs_fork
def test_concurrent_saves_and_loads_never_fail_and_never_mix_two_saves(tmp_path):
    path = tmp_path / "ix"
    persistence.write_index_dir(
        path, kind="stress", documents={"params.json": {"tag": 0}},
        arrays={"arrays.safetensors": {"tag": np.zeros(256, dtype=np.int64)}},
        faiss_indexes={"vectors.faiss": _tagged_index(0)},
    )
    context = multiprocessing.get_context("fork")
    reports = context.Queue()
    stop_at = time.monotonic() + 2.5
    workers = [context.Process(target=_stress_writer, args=(path, w, stop_at, reports)) for w in (1, 2)]
    workers += [context.Process(target=_stress_reader, args=(path, stop_at, reports)) for _ in range(2)]
    for worker in workers:
        worker.start()
    lines = [reports.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(30)
    failures = [line for line in lines if not line.startswith(("saves", "loads"))]
    assert failures == []
    counts = {kind: sum(int(line.split()[1]) for line in lines if line.startswith(kind)) for kind in ("saves", "loads")}
    assert counts["saves"] > 4 and counts["loads"] > 4, counts
    only_ours_left(path)


def test_concurrent_saves_in_threads_leave_one_complete_index(index, data, tmp_path):
    path = tmp_path / "ix"
    others = [_fitted_variant(data, seed) for seed in (1, 2, 3)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda ix: [ix.save(path) for _ in range(3)], [index, *others]))
    loaded = AlignedIndex.load(path)
    assert any(np.array_equal(loaded.aligned_prototypes(), ix.aligned_prototypes()) for ix in [index, *others])
    only_ours_left(path)


# ------------------------------------------------------------------ what save may delete, links, permissions
def test_a_resave_keeps_foreign_files_and_refuses_with_a_fix(index, saved):
    (saved / "notes.txt").write_text("my notes")
    before = (saved / "manifest.json").read_bytes()
    with pytest.raises(IndexPathError, match=r"did not write \(notes.txt\).*Move them out"):
        index.save(saved)
    assert (saved / "notes.txt").read_text() == "my notes" and (saved / "manifest.json").read_bytes() == before
    AlignedIndex.load(saved)


def test_a_directory_whose_manifest_merely_names_the_format_is_not_overwritten(index, tmp_path):
    path = tmp_path / "project"
    path.mkdir()
    (path / "manifest.json").write_text(json.dumps({"format": "lfa-index"}))
    (path / "results.csv").write_text("a,b\n")
    (path / "runs").mkdir()
    with pytest.raises(IndexPathError, match="not an lfa-index"):
        index.save(path)
    assert sorted(p.name for p in path.iterdir()) == ["manifest.json", "results.csv", "runs"]


def test_save_and_load_go_through_a_symbolic_link(index, data, tmp_path):
    real = tmp_path / "real"
    _fitted_variant(data, 1).save(real)
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    assert index.save(link) == link
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert_same(answers(AlignedIndex.load(link), data), answers(index, data))
    assert_same(answers(AlignedIndex.load(real), data), answers(index, data))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]
    dangling = tmp_path / "later"
    dangling.symlink_to(tmp_path / "made-by-save")
    index.save(dangling)
    assert_same(answers(AlignedIndex.load(dangling), data), answers(index, data))
    (tmp_path / "file").write_text("x")
    (tmp_path / "to-file").symlink_to(tmp_path / "file")
    with pytest.raises(IndexPathError, match="is a file"):
        index.save(tmp_path / "to-file")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="chmod does not restrict root")
def test_a_read_only_directory_raises_a_permission_error_naming_it(index, tmp_path):
    path = index.save(tmp_path / "ix")
    path.chmod(0o555)
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(IndexPermissionError, match=f"cannot write the index to {path}") as caught:
            index.save(path)
        with pytest.raises(IndexPermissionError, match="fresh"):
            index.save(tmp_path / "fresh")
    finally:
        tmp_path.chmod(0o755)
        path.chmod(0o755)
    assert isinstance(caught.value, PermissionError)
    only_ours_left(path)


def test_a_refused_write_names_the_given_path_not_a_temporary_one(index, saved, monkeypatch):
    def refused(*args, prefix="", dir=None, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", f"{dir}/{prefix}x1y2z3w4")

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    with pytest.raises(IndexPermissionError) as caught:
        index.save(saved)
    assert isinstance(caught.value, PermissionError)
    assert str(saved) in str(caught.value) and "x1y2z3w4" not in str(caught.value)
    monkeypatch.undo()
    AlignedIndex.load(saved)


def test_a_path_below_a_file_is_a_typed_path_error(index, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(IndexPathError, match="file/ix"):
        index.save(tmp_path / "file" / "ix")
