"""Backend names to sandboxes: resolve `auto`, build factories and warm pools from a spec."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from typing import Any

from opd_gym.errors import ConfigError
from opd_gym.sandboxes.base import Sandbox, SandboxUnavailable
from opd_gym.sandboxes.pool import SandboxPool

BACKENDS = ("docker", "bwrap", "local")


def _split(spec: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    if isinstance(spec, str):
        return spec, {}
    options = dict(spec)
    return options.pop("backend", "docker"), options


def resolve_backend(spec: str | Mapping[str, Any] = "auto") -> str:
    """The backend `spec` means here; `auto` is docker, else bwrap, else local."""
    name, _ = _split(spec)
    if name != "auto":
        if name not in BACKENDS:
            raise ConfigError(f"unknown sandbox backend {name!r}; choose one of {BACKENDS} or auto")
        return name
    try:
        from opd_gym.sandboxes.docker import DockerConfig, DockerEngine

        if DockerEngine(timeout=5).has_image(DockerConfig().image):
            return "docker"
    except SandboxUnavailable:
        pass
    return "bwrap" if shutil.which("bwrap") else "local"


def sandbox_factory(spec: str | Mapping[str, Any] = "docker") -> Callable[[], Sandbox]:
    """A zero-argument callable making unstarted sandboxes of the backend `spec` names.

    `spec` is a backend name or a mapping {"backend": name, **options}; Docker options go to
    `DockerConfig` (plus output_cap/file_cap/default_timeout), others to the backend class.
    """
    name, options = _split(spec)
    name = resolve_backend(name)
    common = {
        k: options.pop(k) for k in ("output_cap", "file_cap", "default_timeout") if k in options
    }
    if name == "docker":
        from opd_gym.sandboxes.docker import DockerConfig, DockerEngine, DockerSandbox
        from opd_gym.sandboxes.reaper import prune

        config = DockerConfig(**options)
        engine = DockerEngine(timeout=config.api_timeout)
        if not engine.has_image(config.image):
            raise SandboxUnavailable(
                f"the sandbox image {config.image!r} is missing: run `opd-gym sandbox build`"
            )
        prune(engine)  # containers left by dead owners go before we add ours
        return lambda: DockerSandbox(config, engine=engine, **common)
    if name == "bwrap":
        from opd_gym.sandboxes.bwrap import BwrapSandbox

        return lambda: BwrapSandbox(**options, **common)
    from opd_gym.sandboxes.local import LocalSandbox

    return lambda: LocalSandbox(**options, **common)


def make_pool(
    spec: str | Mapping[str, Any] = "docker", size: int = 2, **kwargs: Any
) -> SandboxPool:
    """A warm pool of sandboxes of backend `spec` (Docker: reaps orphaned containers first).

    A Docker pool can also hand out pools of other images (`SandboxPool.with_image`), with
    the same options: what repository tasks with their own environment image play in."""
    factory = sandbox_factory(spec)
    name, options = _split(spec)
    for_image = None
    if resolve_backend(name) == "docker":
        def for_image(image: str, **more: Any) -> Callable[[], Sandbox]:
            return sandbox_factory({**options, **more, "backend": "docker", "image": image})
    return SandboxPool(factory, size=size, factory_for_image=for_image, **kwargs)
