"""Cranfield, unrelated sentences and their embeddings for ``benchmarks/migration.py``.

* **Cranfield** (``retrieval/cranfield`` of the shared data folder): the 1,400 documents (the
  ``.W`` abstract, whitespace collapsed; the two without text are :data:`EMPTY_DOCUMENT`), the 225
  queries and the corrected graded judgements (``QRelsCorrectedforTRECeval``, queries numbered 1..225 in file order).
* **Unrelated pairs**: 2,500 Banking77 ``train.csv`` sentences and 2,500 AG News ``test.csv``
  items (``"{title}. {description}"``), drawn with seed 0; none is a Cranfield document.
* **Embeddings** come from the encoder registry (``make_encoder``) with its on-disk cache under
  ``.cache/lfa-bench/encoders``: a rerun costs nothing. Each model embeds documents and pairs in
  its document role and queries in its query role (e5: ``passage:`` / ``query:``; MiniLM and
  static-64 have one role).
* **Short views**: the first sentence of each document with more than one
  (:func:`lfa_index.adapters.first_sentence`), and every sentence of it
  (:func:`lfa_index.adapters.sentences`), and its overlapping 12-word spans
  (:func:`lfa_index.adapters.windows`), each embedded in both roles: pairs of the queries' length.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.data import CACHE_DIR, data_root
from lfa_index.adapters import first_sentence, make_encoder
from lfa_index.adapters import sentences as split_sentences
from lfa_index.adapters import windows as split_windows

ENCODER_CACHE = CACHE_DIR / "encoders"
MODELS: dict[str, tuple[str, str]] = {  # name -> (document-role SPEC, query-role SPEC)
    "minilm": ("minilm", "minilm"),
    "e5-small": ("e5-small:passage", "e5-small"),
    "static-64": ("static-64", "static-64"),
}
EMPTY_DOCUMENT = "empty document"  # the encoders refuse empty texts; two Cranfield records have none
UNRELATED_PER_SET = 2500
UNRELATED_SEED = 0


@dataclass(frozen=True)
class Cranfield:
    """Document and query texts, and graded judgements ``qrels[query] = {doc: grade}`` (0-based)."""

    documents: list[str]
    queries: list[str]
    qrels: dict[int, dict[int, int]]


def _records(path: Path) -> list[dict[str, str]]:
    """The SMART-format records of a Cranfield file: ``{"T": ..., "W": ...}`` per ``.I`` block."""
    records = []
    for block in re.split(r"^\.I ", path.read_text(encoding="latin-1"), flags=re.M)[1:]:
        fields: dict[str, str] = {}
        field = None
        for line in block.split("\n")[1:]:
            marker = re.fullmatch(r"\.([TABW])\s*", line)
            if marker:
                field = marker.group(1)
                fields[field] = ""
            elif field:
                fields[field] += line + " "
        records.append({k: " ".join(v.split()) for k, v in fields.items()})
    return records


def load_cranfield(root: Path | None = None) -> Cranfield:
    """The Cranfield collection of the shared data folder (see the module docstring)."""
    folder = data_root(root) / "retrieval" / "cranfield"
    documents = [r.get("W") or EMPTY_DOCUMENT for r in _records(folder / "cran.all.1400")]
    queries = [r.get("W", "") for r in _records(folder / "cran.qry")]
    qrels: dict[int, dict[int, int]] = {}
    for line in (folder / "QRelsCorrectedforTRECeval").read_text().split("\n"):
        if line.strip():
            query, _, doc, grade = line.split()
            qrels.setdefault(int(query) - 1, {})[int(doc) - 1] = int(grade)
    return Cranfield(documents, queries, qrels)


def unrelated_texts(root: Path | None = None) -> list[str]:
    """Banking77 and AG News sentences (seeded draw, see the module docstring)."""
    base = data_root(root) / "text"
    with open(base / "banking77" / "train.csv", newline="", encoding="utf-8") as f:
        banking = [row["text"] for row in csv.DictReader(f)]
    with open(base / "ag_news" / "test.csv", newline="", encoding="utf-8") as f:
        news = [f"{row[1]}. {row[2]}" for row in csv.reader(f)]
    rng = np.random.default_rng(UNRELATED_SEED)
    picked = [banking[i] for i in rng.choice(len(banking), UNRELATED_PER_SET, replace=False)]
    return picked + [news[i] for i in rng.choice(len(news), UNRELATED_PER_SET, replace=False)]


def embed(spec: str, texts: list[str]) -> np.ndarray:
    """``texts`` embedded by the encoder ``spec`` (unit float32 rows), through the on-disk cache."""
    return make_encoder(spec, cache_dir=ENCODER_CACHE, progress=False, device="cpu").embed_texts(texts)


@dataclass(frozen=True)
class ModelRows:
    """One model's rows: documents and unrelated texts (document role), queries and unrelated texts
    (query role)."""

    documents: np.ndarray
    queries: np.ndarray
    unrelated: np.ndarray
    unrelated_queries: np.ndarray
    first_sentences: np.ndarray  # query role: each document's first sentence (``first_sentence``), where it has one
    sentence_of: np.ndarray  # the document index of each row of first_sentences
    first_sentences_as_documents: np.ndarray  # the same sentences in the document role
    every_sentence: np.ndarray  # query role: every sentence of each document with more than one (``sentences``)
    every_sentence_of: np.ndarray  # the document index of each row of every_sentence
    every_sentence_as_documents: np.ndarray  # the same sentences in the document role
    windows: np.ndarray  # query role: the 12-word spans of each document (``lfa_index.adapters.windows``)
    window_of: np.ndarray  # the document index of each row of windows
    windows_as_documents: np.ndarray  # the same spans in the document role


def model_rows(name: str, data: Cranfield, unrelated: list[str]) -> ModelRows:
    """Every row the benchmark needs of model ``name`` (a key of :data:`MODELS`)."""
    document_spec, query_spec = MODELS[name]
    unrelated_rows = embed(document_spec, unrelated)
    views = [first_sentence(d) for d in data.documents]
    sentence_of = np.array([i for i, v in enumerate(views) if v is not None])
    sentences = [views[i] for i in sentence_of]
    sentence_rows = embed(query_spec, sentences)
    every = [(i, s) for i, d in enumerate(data.documents) for s in split_sentences(d)]
    every_rows = embed(query_spec, [s for _, s in every])
    spans = [(i, s) for i, d in enumerate(data.documents) for s in split_windows(d)]
    span_rows = embed(query_spec, [s for _, s in spans])
    return ModelRows(
        documents=embed(document_spec, data.documents),
        queries=embed(query_spec, data.queries),
        unrelated=unrelated_rows,
        unrelated_queries=unrelated_rows if query_spec == document_spec else embed(query_spec, unrelated),
        first_sentences=sentence_rows,
        sentence_of=sentence_of,
        first_sentences_as_documents=sentence_rows if query_spec == document_spec else embed(document_spec, sentences),
        every_sentence=every_rows,
        every_sentence_of=np.array([i for i, _ in every]),
        every_sentence_as_documents=every_rows if query_spec == document_spec else
        embed(document_spec, [s for _, s in every]),
        windows=span_rows,
        window_of=np.array([i for i, _ in spans]),
        windows_as_documents=span_rows if query_spec == document_spec else embed(document_spec, [s for _, s in spans]),
    )


def every_model_rows(root: Path | None = None) -> tuple[Cranfield, dict[str, ModelRows]]:
    """Cranfield and the rows of every model of :data:`MODELS` (documents, queries, unrelated texts)."""
    data = load_cranfield(root)
    unrelated = unrelated_texts(root)
    return data, {name: model_rows(name, data, unrelated) for name in MODELS}


def ndcg_recall(scores: np.ndarray, qrels: dict[int, dict[int, int]], k: int = 10,
                depth: int = 100) -> tuple[float, float]:
    """Mean nDCG@k (gain ``2^grade − 1``, log2 discount) and recall@depth over the judged queries."""
    order = np.argsort(-scores, axis=1, kind="stable")
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    ndcg, recall = [], []
    for query, judged in sorted(qrels.items()):
        gains = np.array([judged.get(int(d), 0) for d in order[query, :k]], dtype=np.float64)
        ideal = np.sort(np.array(list(judged.values()), dtype=np.float64))[::-1][:k]
        ndcg.append(float(((2**gains - 1) * discount).sum() / ((2**ideal - 1) * discount[:len(ideal)]).sum()))
        recall.append(len(set(order[query, :depth].tolist()) & set(judged)) / len(judged))
    return float(np.mean(ndcg)), float(np.mean(recall))
