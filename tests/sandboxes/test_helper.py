"""The helper's transports: closing one from another thread while a command reads."""

from __future__ import annotations

import socket
import threading

import pytest

from opd_gym.sandboxes import SandboxDied
from opd_gym.sandboxes.helper import DockerExecTransport


class PausingSocket:
    """A real socket whose `recv` stops at a gate first, so that `close` lands at the one
    moment a thread race would otherwise pick: a reader between reading the descriptor's
    number and waiting on it. The pause is the only thing not real here."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.entered = threading.Event()
        self.gate = threading.Event()

    def __getattr__(self, name: str):
        return getattr(self.sock, name)

    def recv(self, size: int) -> bytes:
        self.entered.set()
        assert self.gate.wait(30)
        return self.sock.recv(size)


def test_close_under_a_reader_frees_the_descriptor_only_after_it_left():
    """CI: a command blocked in one thread, `close` in another. Closing the descriptor under
    the reader let the engine's next connection reuse its number, and the reader waited on
    that connection for its whole timeout. The descriptor must outlive the reader, which
    wakes to end of stream, and go as soon as it leaves."""
    ours, theirs = socket.socketpair()
    paused = PausingSocket(ours)
    transport = DockerExecTransport(paused)  # type: ignore[arg-type]
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(transport._read_some(30)))
    reader.start()
    assert paused.entered.wait(10)
    transport.close()
    assert ours.fileno() != -1, "closed under a reader: its number is free for reuse"
    paused.gate.set()
    reader.join(10)
    assert not reader.is_alive()
    assert got == [b""]  # woken by the shutdown: end of stream
    assert ours.fileno() == -1  # released by the reader on its way out
    with pytest.raises(SandboxDied, match="closed"):
        transport._read_some(1)
    theirs.close()


def test_close_with_no_reader_frees_the_descriptor_at_once():
    ours, theirs = socket.socketpair()
    transport = DockerExecTransport(ours)
    transport.close()
    transport.close()  # a second close does nothing
    assert ours.fileno() == -1
    with pytest.raises(SandboxDied):
        transport.send(b"x")
    theirs.close()
