"""A warm pool: sandboxes started in the background so a reset takes a ping, not a boot."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from opd_gym.errors import ConfigError
from opd_gym.sandboxes.base import Sandbox, SandboxError, SandboxTimeout


class SandboxPool:
    """Keeps `size` started sandboxes ready; sandboxes are single-use and closed on release."""

    def __init__(
        self,
        factory: Callable[[], Sandbox],
        size: int = 2,
        *,
        workers: int = 2,
        acquire_timeout: float = 120.0,
        factory_for_image: Callable[[str], Callable[[], Sandbox]] | None = None,
    ) -> None:
        if size < 0:
            raise ConfigError("pool size must be >= 0")
        self.factory = factory
        self.factory_for_image = factory_for_image
        self._workers = workers
        self._by_image: dict[str, SandboxPool] = {}
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
        sandbox = None
        try:
            sandbox = self.factory()
            sandbox.start()
        except BaseException as exc:  # reported to the next acquire, never lost
            self._last_error = exc
            if sandbox is not None:
                sandbox.close()
            with self._lock:
                self._in_flight -= 1
            return
        with self._lock:
            self._in_flight -= 1
            if self._closed:
                sandbox.close()
                return
            self._last_error = None
            self._ready.put(sandbox)

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
            if sandbox.alive:
                return sandbox
            self._executor.submit(sandbox.close)

    def release(self, sandbox: Sandbox) -> None:
        """Dispose of a used sandbox in the background (it is never handed out again)."""
        if self._closed:
            sandbox.close()
        else:
            self._track(self._executor.submit(sandbox.close))

    def with_image(self, image: str) -> SandboxPool:
        """A warm pool like this one whose sandboxes run `image` (made on first use, kept and
        closed with this pool); refused for a backend that cannot run images."""
        with self._lock:
            if self._closed:
                raise SandboxError("the sandbox pool is closed")
            pool = self._by_image.get(image)
            if pool is None:
                if self.factory_for_image is None:
                    raise ConfigError(f"this task runs in its own image ({image}), which only "
                                      "the docker sandbox backend can start")
                pool = SandboxPool(self.factory_for_image(image), self.size,
                                   workers=self._workers, acquire_timeout=self.acquire_timeout)
                self._by_image[image] = pool
            return pool

    # -- shutdown --------------------------------------------------------------------------
    def close(self) -> None:
        """Close every ready sandbox and wait for background work; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            children = list(self._by_image.values())
        for child in children:
            child.close()
        for future in list(self._pending):
            try:
                future.result(timeout=60)
            except Exception:
                pass
        while True:
            try:
                self._ready.get_nowait().close()
            except queue.Empty:
                break
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
