"""SandboxPool's prepared sandboxes (`with_prepared`, `take_prepared`), on real local
sandboxes: what `prepare` makes is handed out with its sandbox, closed when unused, and never
leaks into the plain pool."""

from __future__ import annotations

import threading

from opd_gym.sandboxes import make_pool


class Waiting:
    """Stands for a process `prepare` leaves waiting in a sandbox; records its closing."""

    def __init__(self, sandbox, made: list[Waiting]) -> None:
        self.sandbox = sandbox
        self.closed = 0
        self.thread = threading.current_thread().name
        made.append(self)

    def close(self) -> None:
        self.closed += 1


def test_prepared_sandboxes_come_with_what_prepare_made_and_nothing_leaks():
    made: list[Waiting] = []
    with make_pool("local", size=2) as pool:
        warm = pool.with_prepared("waiting", lambda sb: Waiting(sb, made))
        assert pool.with_prepared("waiting", lambda sb: Waiting(sb, made)) is warm  # one per name
        assert warm.size == 1  # at most the parent's size, 1 by default
        assert pool.wait_ready(60)
        sandbox, prepared = warm.take_prepared()
        assert isinstance(prepared, Waiting) and prepared.sandbox is sandbox
        assert prepared.thread.startswith("opd-pool")  # made in the background, not here
        assert sandbox.alive and sandbox.run("echo hi").output == "hi\n"
        warm.release(sandbox)
        assert pool.wait_ready(60)
        # handed out plain (acquire), a prepared sandbox's waiting part is closed unused
        plain = warm.acquire()
        [dropped] = [w for w in made if w.sandbox is plain]
        assert dropped.closed == 1
        warm.release(plain)
        # the parent's own sandboxes are never prepared
        other = pool.acquire()
        assert all(w.sandbox is not other for w in made)
        pool.release(other)
        assert pool.wait_ready(60)
        ready = [w for w in made if w.closed == 0 and w is not prepared]
        assert len(ready) == 1  # the one the warm pool holds now
    # closing the parent closes the warm pool: what its ready sandbox held is closed too
    assert ready[0].closed == 1 and not ready[0].sandbox.alive
    assert prepared.closed == 0  # the taker owns what it took


def test_a_pool_that_keeps_nothing_ready_prepares_nothing():
    made: list[Waiting] = []
    with make_pool("local", size=0) as pool:
        warm = pool.with_prepared("waiting", lambda sb: Waiting(sb, made))
        assert warm.size == 0
        assert warm.take_prepared() is None and made == []  # the caller acquires instead
