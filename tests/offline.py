"""A fixture that fails a test on any connection beyond this machine (model downloads, telemetry)."""

from __future__ import annotations

import socket

import pytest

_LOCAL = ("127.0.0.1", "::1", "localhost")


@pytest.fixture(scope="module")
def no_network():
    """Loopback and Unix sockets pass; anything else raises AssertionError naming the address, and
    an attempt that a library swallowed (telemetry often does) still fails the module at teardown.

    Module-scoped, so it also guards module fixtures that import a framework or open a store."""
    connect = socket.socket.connect
    attempts: list[object] = []

    def guarded(sock: socket.socket, address):
        host = address[0] if isinstance(address, tuple) else address
        if sock.family != socket.AF_UNIX and host not in _LOCAL:
            attempts.append(address)
            raise AssertionError(f"network access to {address!r} during an offline test")
        return connect(sock, address)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", guarded)
        yield
    assert not attempts, f"network access during offline tests: {attempts[:5]}"
