"""Text embeddings from the OpenAI embeddings API (or any server that speaks ``/v1/embeddings``).

Requests stay within the API's per-request limits (at most 2048 inputs and a token budget, with
tokens over-estimated as UTF-8 bytes: every BPE token covers at least one byte). Rate limits
(429), server errors (5xx), timeouts, dropped connections and malformed bodies are retried with
exponential backoff and jitter. With a ``cache_dir``, each batch is stored as soon as it returns,
so a rerun after a crash only pays for the inputs that never came back.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from numbers import Integral, Real
from typing import Any, Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

from ..core.validation import Interval
from ..errors import DimensionMismatchError, EmbeddingAPIError, InvalidParameterError, MissingAPIKeyError
from ..extras import import_extra
from .base import BaseSource

#: Hard limits of the OpenAI embeddings endpoint.
MAX_INPUTS_PER_REQUEST = 2048
MAX_TOKENS_PER_REQUEST = 300_000

#: Output size of the OpenAI models without ``dimensions=``.
KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_RETRYABLE_STATUS = {408, 409, 429}


# Query parameters and message fragments that carry credentials.
_SECRET_NAME = (
    r"(?:api[-_]?key|key|token|access[-_]?token|secret|password|passwd|pwd|auth|authorization|sig|signature"
    r"|credential)"
)
_SECRET_PARAM = re.compile(rf"^{_SECRET_NAME}$", re.IGNORECASE)
_SECRET_PATTERNS = (
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"), r"\1 ***"),
    (re.compile(r"\bsk-[A-Za-z0-9_*-]{4,}"), "sk-***"),
    (re.compile(rf"(?i)\b({_SECRET_NAME})(\"?\s*[:=]\s*\"?)[^\s\"'&,;]+"), r"\1\2***"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@"), r"\1***@"),
)
REDACTED = "***"


def redact_url(url: str) -> str:
    """``url`` without credentials: user:password@ and the values of key/token/secret query parameters."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = urlencode(
        [(k, REDACTED if _SECRET_PARAM.match(k) else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)],
        safe="*",
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with the given secrets, bearer tokens, ``sk-...`` keys and ``key=value`` credentials masked."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def estimate_tokens(text: str) -> int:
    """An upper bound on the tokens of ``text`` that needs no tokenizer: its UTF-8 byte count."""
    return len(text.encode("utf-8"))


def plan_requests(texts: Sequence[str], *, max_inputs: int, max_tokens: int) -> list[list[int]]:
    """Split ``texts`` into consecutive requests of at most ``max_inputs`` items and ``max_tokens``
    estimated tokens (a single text above the budget goes alone: the API judges it)."""
    batches: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for i, text in enumerate(texts):
        n = estimate_tokens(text)
        if current and (len(current) >= max_inputs or tokens + n > max_tokens):
            batches.append(current)
            current, tokens = [], 0
        current.append(i)
        tokens += n
    if current:
        batches.append(current)
    return batches


class _MalformedResponse(Exception):
    """The server answered 200 with a body that is not a valid embeddings response."""


class OpenAIEmbeddingSource(BaseSource):
    """Text embeddings from the OpenAI embeddings API.

    Parameters
    ----------
    model : embedding model name (default ``"text-embedding-3-small"``).
    dimensions : output size passed to the API (``text-embedding-3-*`` only); default: the model's.
    api_key : default ``$OPENAI_API_KEY``; missing, it raises :class:`MissingAPIKeyError` before any
        request.
    base_url : API root; default ``$OPENAI_BASE_URL`` or ``https://api.openai.com/v1``.
    batch_size : at most this many inputs per request (1..2048, default 2048).
    max_tokens_per_request : estimated-token budget of one request (default 300 000).
    timeout : seconds before a request is abandoned and retried (default 60).
    max_retries : retries per request after the first try (default 6).
    backoff : first retry delay in seconds, doubled each retry, with jitter (default 1.0).
    max_backoff : cap of one delay in seconds (default 60).
    cache_dir : folder of the on-disk cache; strongly advised, it is what makes a rerun free.
    progress : show a tqdm progress bar (default True).

    Example
    -------
    >>> source = OpenAIEmbeddingSource("text-embedding-3-small", dimensions=512, cache_dir="emb-cache")
    >>> prototypes = source.embed_texts(["a photo of a cat.", "a photo of a dog."])   # (2, 512)
    """

    _parameter_constraints: dict[str, list[Any]] = {
        **BaseSource._parameter_constraints,
        "batch_size": [Interval(Integral, 1, MAX_INPUTS_PER_REQUEST, closed="both")],
        "max_tokens_per_request": [Interval(Integral, 1, None, closed="left")],
        "timeout": [Interval(Real, 0, None, closed="neither")],
        "max_retries": [Interval(Integral, 0, None, closed="left")],
        "backoff": [Interval(Real, 0, None, closed="left")],
        "max_backoff": [Interval(Real, 0, None, closed="left")],
        "dimensions": [None, Interval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        dimensions: int | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        batch_size: int = MAX_INPUTS_PER_REQUEST,
        max_tokens_per_request: int = MAX_TOKENS_PER_REQUEST,
        timeout: float = 60.0,
        max_retries: int = 6,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        cache_dir: str | os.PathLike | None = None,
        progress: bool = True,
    ):
        self.model = model
        self.dimensions = dimensions
        self.api_key = api_key
        self.base_url = base_url
        self.batch_size = batch_size
        self.max_tokens_per_request = max_tokens_per_request
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.cache_dir = cache_dir
        self.progress = progress

    @property
    def name(self) -> str:
        return f"openai:{self.model}" + (f"@{self.dimensions}" if self.dimensions else "")

    @property
    def dim(self) -> int:
        if self.dimensions is not None:
            return int(self.dimensions)
        if self.model in KNOWN_DIMENSIONS:
            return KNOWN_DIMENSIONS[self.model]
        if getattr(self, "dim_", None) is not None:
            return self.dim_
        raise InvalidParameterError(
            f"The output size of model {self.model!r} is unknown before its first answer; "
            "pass dimensions=... or embed something first."
        )

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts: (N, dim) float32, rows L2-normalised; cached inputs are not sent again."""
        self.check_params()
        key = self._resolve_key()
        client = self._client(key)
        return self._embed_texts_cached(
            texts,
            lambda batch: self._request_with_retries(client, batch),
            batches=lambda todo: plan_requests(
                todo, max_inputs=self.batch_size, max_tokens=self.max_tokens_per_request
            ),
        )

    def _resolve_key(self) -> str:
        key = self.api_key if self.api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        if not key or not key.strip():
            raise MissingAPIKeyError(
                "No OpenAI API key: set the OPENAI_API_KEY environment variable or pass api_key=... "
                "(for a local OpenAI-compatible server any non-empty string works)."
            )
        return key

    def _resolved_base_url(self) -> str:
        return (self.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")

    def _client(self, key: str) -> Any:
        openai = import_extra("openai", extra="openai")
        # Retries are ours (backoff with jitter, malformed bodies too), so the client's are off.
        return openai.OpenAI(
            api_key=key, base_url=self._resolved_base_url(), timeout=self.timeout, max_retries=0
        )

    def _identity(self) -> str:
        # Stored in the cache's metadata: never the credentials a URL may carry.
        return f"openai|{redact_url(self._resolved_base_url())}|{self.model}|dimensions={self.dimensions}"

    def _redact(self, text: str) -> str:
        return redact(text, self.api_key, os.environ.get("OPENAI_API_KEY"))

    def _request_with_retries(self, client: Any, batch: list[str]) -> np.ndarray:
        openai = import_extra("openai", extra="openai")
        for attempt in range(self.max_retries + 1):
            try:
                return self._request(client, batch)
            except openai.APIStatusError as err:
                status = err.status_code
                if status not in _RETRYABLE_STATUS and status < 500:
                    hint = " Check the API key." if status in (401, 403) else ""
                    # not chained: the server's own exception may quote the key
                    raise EmbeddingAPIError(
                        f"The embeddings API refused a request of {len(batch)} inputs with HTTP {status}: "
                        f"{self._redact(str(err.message))}{hint}"
                    ) from None
                failure: Exception = err
                retry_after = _retry_after_seconds(err)
            except (
                openai.APIConnectionError,
                openai.APIResponseValidationError,
                json.JSONDecodeError,
                _MalformedResponse,
            ) as err:
                failure, retry_after = err, 0.0
            if attempt == self.max_retries:
                raise EmbeddingAPIError(
                    f"The embeddings API failed {self.max_retries + 1} times in a row on a request of "
                    f"{len(batch)} inputs; last error: {type(failure).__name__}: {self._redact(str(failure))}. "
                    "Inputs embedded so far are in the cache (with cache_dir set): rerun to resume."
                ) from None
            time.sleep(self._delay(attempt, retry_after))
        raise AssertionError("unreachable")

    def _delay(self, attempt: int, retry_after: float) -> float:
        cap = min(self.max_backoff, self.backoff * 2.0**attempt)
        # "Equal jitter": half the delay is fixed, half random, so clients that failed together
        # do not retry together.
        return max(min(retry_after, self.max_backoff), cap / 2 + random.uniform(0, cap / 2))

    def _request(self, client: Any, batch: list[str]) -> np.ndarray:
        kwargs: dict[str, Any] = {"input": batch, "model": self.model, "encoding_format": "float"}
        if self.dimensions is not None:
            kwargs["dimensions"] = int(self.dimensions)
        response = client.embeddings.create(**kwargs)
        try:
            rows = sorted(response.data, key=lambda d: d.index)
            indices = [d.index for d in rows]
            vectors = np.asarray([d.embedding for d in rows], dtype=np.float32)
        except (AttributeError, TypeError, ValueError) as err:
            raise _MalformedResponse(f"unreadable embeddings response: {err}") from err
        if indices != list(range(len(batch))) or vectors.ndim != 2:
            raise _MalformedResponse(f"the response holds {len(indices)} embeddings for {len(batch)} inputs")
        if not np.isfinite(vectors).all():
            raise _MalformedResponse("the response holds NaN or infinite values")
        self._check_width(int(vectors.shape[1]))
        self.dim_ = int(vectors.shape[1])
        return vectors

    def _check_width(self, width: int) -> None:
        """Refuse an answer whose size is not the one asked for, the model's, or that of earlier answers."""
        if self.dimensions is not None:
            expected, why = int(self.dimensions), f"dimensions={self.dimensions} was asked for"
        elif self.model in KNOWN_DIMENSIONS:
            expected, why = KNOWN_DIMENSIONS[self.model], f"{self.model!r} gives {KNOWN_DIMENSIONS[self.model]}"
        elif getattr(self, "dim_", None) is not None:
            expected, why = self.dim_, "earlier answers had that size"
        else:
            return
        if width != expected:
            raise DimensionMismatchError(
                f"{self.name}: the server at {redact_url(self._resolved_base_url())} answered with {width}-d "
                f"embeddings, not {expected}-d ({why}). Check that it serves model {self.model!r}; for a server "
                f"that ignores dimensions=, leave it unset."
            )


def _retry_after_seconds(err: Any) -> float:
    try:
        return max(0.0, float(err.response.headers.get("retry-after", 0) or 0))
    except (AttributeError, TypeError, ValueError):
        return 0.0
