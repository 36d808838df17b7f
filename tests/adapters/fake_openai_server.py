"""A local OpenAI-compatible ``/v1/embeddings`` server on 127.0.0.1 that injects faults (test helper)."""

from __future__ import annotations

import collections
import hashlib
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

API_KEY = "sk-test-local"


def fake_embedding(text: str, dim: int) -> list[float]:
    """Deterministic pseudo-embedding of a text (not normalised, so the client must normalise)."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    return (np.random.default_rng(seed).normal(size=dim) * 3.0).tolist()


class FakeEmbeddingsServer:
    """Speaks ``POST /v1/embeddings`` on 127.0.0.1; faults are taken one per request from ``faults``.

    Faults: ``"429"``, ``"500"``, ``"503"``, ``"400"``, ``"401"``, ``"slow"`` (answers after
    ``slow_s``, past the client timeout), ``"malformed"`` (invalid JSON), ``"short"`` (one
    embedding missing), ``"hang"`` (holds the request until the server stops), ``"leak"`` and
    ``"leak-500"`` (a 401 or 500 whose message quotes the caller's credentials, as some proxies do).
    ``width_every`` maps a request number to the embedding size of its answer.
    """

    default_dim = 8

    def __init__(self) -> None:
        self.faults: collections.deque[str] = collections.deque()
        self.fault_every: dict[int, str] = {}  # request number (1-based) -> fault
        self.width_every: dict[int, int] = {}  # request number (1-based) -> embedding size of the answer
        self.slow_s = 1.5
        self.requests: list[dict] = []  # every request: inputs, fault, status
        self.paid: list[str] = []  # inputs of requests answered 200 with embeddings
        self.hanging = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server._handle(self, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def _next_fault(self) -> str:
        with self._lock:
            n = len(self.requests) + 1
            if n in self.fault_every:
                return self.fault_every[n]
            return self.faults.popleft() if self.faults else "ok"

    def _handle(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        if h.path != "/v1/embeddings":
            return self._send(h, 404, {"error": {"message": "not found"}})
        payload = json.loads(body)
        inputs = payload["input"]
        fault = self._next_fault()
        record = {
            "inputs": inputs,
            "fault": fault,
            "model": payload.get("model"),
            "dimensions": payload.get("dimensions"),
            "auth": h.headers.get("Authorization"),
        }
        with self._lock:
            self.requests.append(record)
        auth = h.headers.get("Authorization") or ""
        if fault in ("leak", "leak-500"):
            key = auth.removeprefix("Bearer ")
            message = (f"Incorrect API key provided: {key}. Header was 'Authorization: {auth}'; "
                       f"retry at https://admin:hunter22@proxy.local/v1?api-key={key}")
            status = 401 if fault == "leak" else 500
            return self._send(h, status, {"error": {"message": message, "type": "invalid_request_error"}})
        if auth != f"Bearer {API_KEY}" or fault == "401":
            return self._send(
                h, 401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
            )
        if fault in ("429", "500", "503", "400"):
            return self._send(
                h,
                int(fault),
                {"error": {"message": f"injected {fault}", "type": "server_error"}},
                headers={"Retry-After": "0"} if fault == "429" else None,
            )
        if fault == "hang":
            self.hanging.set()
            self._stop.wait(30)
            return
        if fault == "slow":
            time.sleep(self.slow_s)
        if fault == "malformed":
            raw = b'{"object": "list", "data": [{"embedding": [0.1, 0.2'
            return self._send_raw(h, 200, raw)
        with self._lock:
            dim = self.width_every.get(len(self.requests)) or payload.get("dimensions") or self.default_dim
        data = [
            {"object": "embedding", "index": i, "embedding": fake_embedding(t, dim)}
            for i, t in enumerate(inputs)
        ]
        if fault == "short":
            data = data[:-1]
        random.Random(len(self.requests)).shuffle(data)  # the client must order rows by "index"
        try:
            self._send(
                h,
                200,
                {
                    "object": "list",
                    "data": data,
                    "model": payload.get("model"),
                    "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)},
                },
            )
        except (BrokenPipeError, ConnectionResetError):
            return  # the client gave up (timeout): nothing was delivered
        if fault == "ok":
            with self._lock:
                self.paid.extend(inputs)

    def _send(self, h, status: int, obj: dict, headers: dict | None = None) -> None:
        self._send_raw(h, status, json.dumps(obj).encode(), headers)

    def _send_raw(self, h, status: int, raw: bytes, headers: dict | None = None) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(raw)
        h.wfile.flush()

    @property
    def received(self) -> list[str]:
        return [t for r in self.requests for t in r["inputs"]]

    def close(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
