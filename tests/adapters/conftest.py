"""Shared fixtures of the adapter tests."""

from __future__ import annotations

import pytest
from fake_openai_server import FakeEmbeddingsServer


@pytest.fixture
def openai_server():
    server = FakeEmbeddingsServer()
    yield server
    server.close()
