"""A warm pool: sandboxes started in the background so a reset takes a ping, not a boot."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from opd_gym.errors import ConfigError
from opd_gym.sandboxes.base import Sandbox, SandboxError, SandboxTimeout


class Prepared(Protocol):
    """What a pool's `prepare` made in a sandbox (a process waiting there): closed unused."""

    def close(self) -> None: ...


class SandboxPool:
    """Keeps `size` started sandboxes ready; sandboxes are single-use and closed on release.

    With `prepare`, each sandbox also gets it run once started, in the background, and
    `take_prepared` hands out the two together (see `with_prepared`)."""

    def __init__(
        self,
        factory: Callable[[], Sandbox],
        size: int = 2,
        *,
        workers: int = 2,
        acquire_timeout: float = 120.0,
        factory_for_image: Callable[..., Callable[[], Sandbox]] | None = None,
        prepare: Callable[[Sandbox], Prepared] | None = None,
    ) -> None:
        if size < 0:
            raise ConfigError("pool size must be >= 0")
        self.factory = factory
        self.factory_for_image = factory_for_image
        self.prepare = prepare
        self._workers = workers
        self._by_image: dict[Any, SandboxPool] = {}
        self._by_preparation: dict[str, SandboxPool] = {}
        self._prepared: dict[int, Prepared] = {}  # id(ready sandbox): what prepare made
        self.size = size
        self.acquire_timeout = acquire_timeout
        self._ready: queue.Queue[Sandbox] = queue.Queue()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._closed = False
        self._last_error: BaseException | None = None
        self._executor = ThreadPoolExecutor(
            max_workers=max(workers, 1), thread_name_prefix="opd-pool"
        )
        self._pending: set[Future] = set()
        self._refill()

    # -- filling ---------------------------------------------------------------------------
    def _refill(self) -> None:
        with self._lock:
            if self._closed:
                return
            missing = self.size - self._ready.qsize() - self._in_flight
            for _ in range(max(missing, 0)):
                self._in_flight += 1
                self._track(self._executor.submit(self._start_one))

    def _track(self, future: Future) -> None:
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)

    def _start_one(self) -> None:
        sandbox = prepared = None
        try:
            sandbox = self.factory()
            sandbox.start()
            if self.prepare is not None:
                prepared = self.prepare(sandbox)
        except BaseException as exc:  # reported to the next acquire, never lost
            self._last_error = exc
            if sandbox is not None:
                sandbox.close()
            with self._lock:
                self._in_flight -= 1
            return
        with self._lock:
            self._in_flight -= 1
            if not self._closed:
                self._last_error = None
                if prepared is not None:
                    self._prepared[id(sandbox)] = prepared
                self._ready.put(sandbox)
                return
        _dispose(sandbox, prepared)

    # -- hand-out --------------------------------------------------------------------------
    def acquire(self, timeout: float | None = None) -> Sandbox:
        """A started, liveness-checked sandbox; waits for the pool or starts one directly."""
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        deadline = time.monotonic() + (timeout or self.acquire_timeout)
        if self.size == 0:
            sandbox = self.factory()
            sandbox.start()
            return sandbox
        while True:
            try:
                sandbox = self._ready.get(timeout=0.05)
            except queue.Empty:
                with self._lock:
                    failed, self._last_error = self._last_error, None
                if failed is not None:
                    raise SandboxError(
                        f"the sandbox pool could not start a sandbox: {failed}"
                    ) from None
                self._refill()
                if time.monotonic() > deadline:
                    raise SandboxTimeout("no sandbox became ready in time") from None
                continue
            self._refill()
            prepared = self._take(sandbox)
            if prepared is not None:
                prepared.close()  # handed out plain: what prepare made goes unused
            if sandbox.alive:
                return sandbox
            self._executor.submit(sandbox.close)

    def take_prepared(self) -> tuple[Sandbox, Prepared | None] | None:
        """A ready, live sandbox with what `prepare` made in it, or None when no sandbox is
        ready now (this never waits: the caller falls back to `acquire`)."""
        while not self._closed:
            try:
                sandbox = self._ready.get_nowait()
            except queue.Empty:
                self._refill()
                return None
            self._refill()
            prepared = self._take(sandbox)
            if sandbox.alive:
                return sandbox, prepared
            self._executor.submit(_dispose, sandbox, prepared)
        return None

    def _take(self, sandbox: Sandbox) -> Prepared | None:
        with self._lock:
            return self._prepared.pop(id(sandbox), None)

    def release(self, sandbox: Sandbox) -> None:
        """Dispose of a used sandbox in the background (it is never handed out again)."""
        if self._closed:
            sandbox.close()
        else:
            self._track(self._executor.submit(sandbox.close))

    def with_image(self, image: str, **options: Any) -> SandboxPool:
        """A warm pool like this one whose sandboxes run `image` (made on first use, kept and
        closed with this pool); refused for a backend that cannot run images. `options`
        change the container's settings (`DockerConfig` fields, e.g. a Harbor task's
        workspace and limits); a pool is kept per image and options."""
        key = (image, tuple(sorted(options.items()))) if options else image
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox pool is closed")
            pool = self._by_image.get(key)
            if pool is None:
                if self.factory_for_image is None:
                    raise ConfigError(f"this task runs in its own image ({image}), which only "
                                      "the docker sandbox backend can start")
                pool = SandboxPool(self.factory_for_image(image, **options), self.size,
                                   workers=self._workers, acquire_timeout=self.acquire_timeout)
                self._by_image[key] = pool
            return pool

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Wait until this pool and the pools it made hold their `size` ready sandboxes (a
        benchmark's fair start); whether they did within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            children = [*self._by_image.values(), *self._by_preparation.values()]
        self._refill()
        while self._ready.qsize() < self.size and not self._closed:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return all(child.wait_ready(max(deadline - time.monotonic(), 0.0))
                   for child in children)

    def with_prepared(self, name: str, prepare: Callable[[Sandbox], Prepared],
                      size: int = 1) -> SandboxPool:
        """A warm pool like this one (its factory, so its image) whose sandboxes each get
        `prepare` run once started (made on first use under `name`, kept and closed with this
        pool): a grader's harness waiting in a grading sandbox, say. Its size is at most this
        pool's: a pool that keeps none ready makes none."""
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox pool is closed")
            pool = self._by_preparation.get(name)
            if pool is None:
                pool = SandboxPool(self.factory, min(size, self.size), workers=self._workers,
                                   acquire_timeout=self.acquire_timeout, prepare=prepare)
                self._by_preparation[name] = pool
            return pool

    # -- shutdown --------------------------------------------------------------------------
    def close(self) -> None:
        """Close every ready sandbox and wait for background work; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            children = [*self._by_image.values(), *self._by_preparation.values()]
        for child in children:
            child.close()
        for future in list(self._pending):
            try:
                future.result(timeout=60)
            except Exception:
                pass
        while True:
            try:
                sandbox = self._ready.get_nowait()
            except queue.Empty:
                break
            _dispose(sandbox, self._take(sandbox))
        self._executor.shutdown(wait=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _dispose(sandbox: Sandbox, prepared: Prepared | None) -> None:
    """Close what prepare made, then its sandbox."""
    try:
        if prepared is not None:
            prepared.close()
    finally:
        sandbox.close()
