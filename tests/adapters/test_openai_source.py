"""OpenAIEmbeddingSource against a local /v1/embeddings server that injects faults."""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openai")

from fake_openai_server import API_KEY, fake_embedding  # noqa: E402

from lfa_index.adapters import (  # noqa: E402
    EmbeddingAPIError,
    MissingAPIKeyError,
    MissingExtraError,
    UnsupportedModalityError,
    openai_api,  # noqa: E402
)
from lfa_index.adapters.openai_api import OpenAIEmbeddingSource, plan_requests  # noqa: E402
from lfa_index.errors import DimensionMismatchError  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MODEL = "local-embedding-model"  # the fake server answers 8-d rows; OpenAI's model names have known sizes


def make_source(server, **kwargs) -> OpenAIEmbeddingSource:
    params = dict(
        model=MODEL,
        api_key=API_KEY,
        base_url=server.url,
        backoff=0.001,
        max_backoff=0.01,
        timeout=5.0,
        progress=False,
    )
    params.update(kwargs)
    return OpenAIEmbeddingSource(**params)


def expected(texts, dim=8) -> np.ndarray:
    e = np.asarray([fake_embedding(t, dim) for t in texts], dtype=np.float32)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def test_missing_key_raises_before_any_request(openai_server, monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    source = make_source(openai_server, api_key=None, cache_dir=tmp_path)
    with pytest.raises(MissingAPIKeyError, match="OPENAI_API_KEY"):
        source.embed_texts(["a cat"])
    assert openai_server.requests == []
    assert isinstance(MissingAPIKeyError("x"), ValueError)


def test_key_is_read_from_the_environment(openai_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    out = make_source(openai_server, api_key=None).embed_texts(["a cat"])
    assert openai_server.requests[0]["auth"] == f"Bearer {API_KEY}"
    np.testing.assert_allclose(out, expected(["a cat"]), atol=1e-6)


def test_rows_are_normalised_float32_in_input_order(openai_server):
    texts = [f"text number {i}" for i in range(37)]
    out = make_source(openai_server, batch_size=10).embed_texts(texts)
    assert out.dtype == np.float32 and out.shape == (37, 8)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(out, expected(texts), atol=1e-6)  # the server shuffles "data"


def test_requests_hold_at_most_2048_inputs(openai_server):
    texts = [f"t{i}" for i in range(4100)]
    make_source(openai_server).embed_texts(texts)
    assert [len(r["inputs"]) for r in openai_server.requests] == [2048, 2048, 4]


def test_requests_stay_within_the_token_budget(openai_server):
    rng = np.random.default_rng(0)
    texts = ["w" * int(n) + f" {i}" for i, n in enumerate(rng.integers(1, 60, size=200))]
    make_source(openai_server, max_tokens_per_request=300).embed_texts(texts)
    sizes = [sum(len(t.encode()) for t in r["inputs"]) for r in openai_server.requests]
    assert max(sizes) <= 300 and len(sizes) > 1
    assert openai_server.received == texts


def test_token_estimate_never_undercounts_multibyte_text():
    # one token covers at least one UTF-8 byte, so the byte count bounds the token count
    assert openai_api.estimate_tokens("héllo 猫") == len("héllo 猫".encode("utf-8")) == 10
    assert plan_requests(["aaaa", "bb", "cccccc", "d"], max_inputs=10, max_tokens=6) == [[0, 1], [2], [3]]


def test_dimensions_are_passed_through(openai_server):
    source = make_source(openai_server, dimensions=5)
    out = source.embed_texts(["a cat", "a dog"])
    assert out.shape == (2, 5) and source.dim == 5
    assert openai_server.requests[0]["dimensions"] == 5
    np.testing.assert_allclose(out, expected(["a cat", "a dog"], dim=5), atol=1e-6)


def test_429_5xx_timeouts_and_malformed_bodies_are_retried(openai_server):
    faults = ["429", "500", "slow", "malformed", "short", "503"]
    openai_server.faults.extend(faults)
    openai_server.slow_s = 1.0
    texts = [f"sentence {i}" for i in range(50)]
    out = make_source(openai_server, batch_size=20, timeout=0.4).embed_texts(texts)
    np.testing.assert_allclose(out, expected(texts), atol=1e-6)
    statuses = collections.Counter(r["fault"] for r in openai_server.requests)
    assert statuses == collections.Counter(faults + ["ok"] * 3)  # 3 batches, 6 injected faults
    assert sorted(openai_server.paid) == sorted(texts)  # every input delivered exactly once


def test_backoff_doubles_with_jitter_and_honours_the_cap(openai_server, monkeypatch):
    delays: list[float] = []
    monkeypatch.setattr(openai_api, "time", types.SimpleNamespace(sleep=delays.append))
    openai_server.faults.extend(["500"] * 5)
    make_source(openai_server, backoff=0.1, max_backoff=0.8).embed_texts(["a"])
    bounds = [(0.05, 0.1), (0.1, 0.2), (0.2, 0.4), (0.4, 0.8), (0.4, 0.8)]
    assert len(delays) == 5
    for d, (lo, hi) in zip(delays, bounds):
        assert lo <= d <= hi


def test_gives_up_with_a_typed_error_when_retries_are_spent(openai_server):
    openai_server.faults.extend(["500"] * 10)
    with pytest.raises(EmbeddingAPIError, match="3 times"):
        make_source(openai_server, max_retries=2).embed_texts(["a", "b"])
    assert len(openai_server.requests) == 3


def test_client_errors_are_not_retried(openai_server):
    openai_server.faults.append("400")
    with pytest.raises(EmbeddingAPIError, match="HTTP 400"):
        make_source(openai_server).embed_texts(["a"])
    with pytest.raises(EmbeddingAPIError, match="API key"):
        make_source(openai_server, api_key="sk-wrong").embed_texts(["a"])
    assert len(openai_server.requests) == 2


def test_rerun_with_cache_sends_nothing(openai_server, tmp_path):
    texts = [f"doc {i}" for i in range(30)]
    first = make_source(openai_server, cache_dir=tmp_path, batch_size=8).embed_texts(texts)
    n_requests = len(openai_server.requests)
    again = make_source(openai_server, cache_dir=tmp_path, batch_size=8).embed_texts(
        texts[::-1] + ["new one"]
    )
    assert len(openai_server.requests) == n_requests + 1
    assert openai_server.requests[-1]["inputs"] == ["new one"]
    np.testing.assert_array_equal(again[:30], first[::-1])


def test_duplicate_inputs_are_sent_once(openai_server):
    out = make_source(openai_server).embed_texts(["a", "b", "a", "a"])
    assert openai_server.received == ["a", "b"]
    np.testing.assert_array_equal(out[0], out[2])


def test_crash_then_resume_pays_each_input_once(openai_server, tmp_path):
    texts = [f"item {i}" for i in range(100)]
    openai_server.fault_every = {4: "401"}  # the 4th request fails for good: the run crashes
    with pytest.raises(EmbeddingAPIError):
        make_source(openai_server, cache_dir=tmp_path, batch_size=25).embed_texts(texts)
    assert len(openai_server.paid) == 75
    openai_server.fault_every = {}
    n_before = len(openai_server.received)
    out = make_source(openai_server, cache_dir=tmp_path, batch_size=25).embed_texts(texts)
    assert openai_server.received[n_before:] == texts[75:]
    assert sorted(openai_server.paid) == sorted(texts)  # nothing paid twice
    np.testing.assert_allclose(out, expected(texts), atol=1e-6)


def test_killed_process_resumes_without_paying_twice(openai_server, tmp_path):
    """SIGKILL in the middle of a request: completed batches survive on disk, intact."""
    texts = [f"row {i}" for i in range(60)]
    openai_server.fault_every = {3: "hang"}
    script = textwrap.dedent(
        f"""
        from lfa_index.adapters.openai_api import OpenAIEmbeddingSource
        texts = [f"row {{i}}" for i in range(60)]
        OpenAIEmbeddingSource({MODEL!r}, api_key={API_KEY!r}, base_url={openai_server.url!r}, batch_size=20,
                              cache_dir={str(tmp_path)!r}, progress=False).embed_texts(texts)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stderr=subprocess.PIPE)
    try:
        assert openai_server.hanging.wait(60), proc.stderr.read().decode() if proc.poll() is not None else ""
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    assert sorted(openai_server.paid) == sorted(texts[:40])
    assert not list(tmp_path.rglob("*.tmp"))
    n_before = len(openai_server.received)
    out = make_source(openai_server, cache_dir=tmp_path, batch_size=20).embed_texts(texts)
    assert openai_server.received[n_before:] == texts[40:]
    assert sorted(openai_server.paid) == sorted(texts)
    np.testing.assert_allclose(out, expected(texts), atol=1e-6)


def test_images_are_an_unsupported_modality(openai_server):
    with pytest.raises(UnsupportedModalityError):
        make_source(openai_server).embed_images(["cat.jpg"])


def test_missing_openai_package_names_the_extra(openai_server, monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(MissingExtraError, match=r"lfa-index\[openai\]"):
        make_source(openai_server).embed_texts(["a"])
    assert openai_server.requests == []


def test_unknown_model_dim_needs_dimensions_or_a_first_answer(openai_server):
    source = make_source(openai_server, model="my-local-model")
    with pytest.raises(ValueError, match="dimensions="):
        source.dim
    source.embed_texts(["a"])
    assert source.dim == 8


# ------------------------------------------------------------------ answers of the wrong size
def test_widths_that_change_between_batches_are_a_typed_error_and_never_cached(openai_server, tmp_path):
    openai_server.width_every = {2: 12}
    texts = [f"text {i}" for i in range(6)]
    with pytest.raises(DimensionMismatchError, match=rf"{MODEL}.* 12-d embeddings, not 8-d"):
        make_source(openai_server, batch_size=2, cache_dir=tmp_path).embed_texts(texts)
    openai_server.width_every = {}
    out = make_source(openai_server, batch_size=2, cache_dir=tmp_path).embed_texts(texts)  # the 12-d batch was not kept
    np.testing.assert_allclose(out, expected(texts), atol=1e-6)


def test_a_cache_filled_at_another_width_is_a_typed_error(openai_server, tmp_path):
    make_source(openai_server, cache_dir=tmp_path).embed_texts(["old one", "old two"])
    openai_server.default_dim = 12  # the model behind the name changed
    with pytest.raises(DimensionMismatchError, match=rf"{MODEL} text.* size 12 but the cache holds size 8.*delete"):
        make_source(openai_server, cache_dir=tmp_path).embed_texts(["old one", "a new text"])


def test_an_answer_of_the_wrong_size_for_a_known_model_is_refused(openai_server):
    source = make_source(openai_server, model="text-embedding-3-small")
    with pytest.raises(DimensionMismatchError, match="8-d embeddings, not 1536-d"):
        source.embed_texts(["a cat"])
    assert source.dim == 1536 and len(openai_server.requests) == 1  # not retried: the answer will not change


def test_credentials_in_the_base_url_never_reach_the_cache(tmp_path, monkeypatch):
    from safetensors import safe_open

    monkeypatch.setattr(
        OpenAIEmbeddingSource, "_request_with_retries", lambda self, client, batch: np.ones((len(batch), 4), np.float32)
    )
    source = OpenAIEmbeddingSource(
        MODEL, api_key=API_KEY, base_url="https://alice:pa55word@proxy.local/v1?api-key=topsecret&api-version=2",
        cache_dir=tmp_path, progress=False,
    )
    source.embed_texts(["a", "b"])
    (shard,) = tmp_path.rglob("*.safetensors")
    with safe_open(str(shard), framework="np") as f:
        identity = f.metadata()["identity"]
    assert "pa55word" not in identity and "alice" not in identity and "topsecret" not in identity
    assert "proxy.local/v1" in identity and "api-version=2" in identity


def test_server_messages_are_redacted_in_errors(openai_server, monkeypatch):
    openai_server.faults.append("leak")
    with pytest.raises(EmbeddingAPIError, match="HTTP 401") as caught:
        make_source(openai_server).embed_texts(["a"])
    text = str(caught.value)
    assert API_KEY not in text and "hunter22" not in text and "Bearer sk" not in text, text
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    openai_server.faults.extend(["leak-500", "leak-500"])
    with pytest.raises(EmbeddingAPIError, match="2 times") as caught:
        make_source(openai_server, api_key=None, max_retries=1).embed_texts(["a"])
    text = str(caught.value)
    assert API_KEY not in text and "hunter22" not in text and "Incorrect API key" in text, text
