"""Build the sandbox image: a Dockerfile where a registry answers, an offline rootfs elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from opd_gym.errors import ConfigError
from opd_gym.resources import data_path
from opd_gym.sandboxes.base import SandboxUnavailable


class ImageEngine(Protocol):
    """What a build needs of the engine (`opd_gym.sandboxes.docker.DockerEngine`, which
    imports this module for the image tag: the engine is given, never imported here)."""

    def has_image(self, image: str) -> bool: ...

    def call(self) -> Any: ...


DEFAULT_IMAGE = "opd-gym-sandbox:5"

# Bump both with any change to the image contents (sandbox/build_rootfs.sh,
# sandbox/grading-requirements.txt, sandbox/Dockerfile): new tag, new cached rootfs.
RECIPE_VERSION = "5"
BASE_IMAGE = "python:3.12-slim"
IMAGE_CHANGES = [
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    "WORKDIR /workspace",
    "USER 1000:1000",
    'CMD ["bash"]',
]


def rootfs_dir() -> Path:
    """Where the offline root filesystem lives (shared by the image build and bwrap)."""
    override = os.environ.get("OPD_GYM_ROOTFS")
    if override:
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "opd_gym" / f"rootfs-{RECIPE_VERSION}"


def build_rootfs(target: Path | None = None, *, log: Callable[[str], None] = print) -> Path:
    """debootstrap the sandbox rootfs into `target` (cached: returns at once if present)."""
    target = target or rootfs_dir()
    if (target / "usr" / "bin" / "python3").exists():
        return target
    if shutil.which("debootstrap") is None:
        raise SandboxUnavailable("debootstrap is missing: apt-get install debootstrap")
    if os.geteuid() != 0:
        raise SandboxUnavailable("building the offline rootfs needs root (debootstrap)")
    target.parent.mkdir(parents=True, exist_ok=True)
    log(f"building the sandbox rootfs offline in {target} (about a minute)...")
    script = data_path("sandbox", "build_rootfs.sh")
    subprocess.run(["bash", str(script), str(target)], check=True)
    return target


def _import_rootfs(engine: ImageEngine, rootfs: Path, image: str) -> None:
    repository, _, tag = image.rpartition(":")
    with tempfile.TemporaryDirectory() as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
        with engine.call() as client:
            client.api.import_image_from_file(
                str(tarball), repository=repository, tag=tag, changes=IMAGE_CHANGES
            )


def _build_dockerfile(engine: ImageEngine, image: str) -> None:
    context = data_path("sandbox")
    with engine.call() as client:
        client.images.build(path=str(context), tag=image, rm=True, pull=False)


def _can_pull(engine: ImageEngine, base: str) -> bool:
    from docker.errors import DockerException

    try:
        with engine.call() as client:
            client.images.get(base)
        return True
    except DockerException:
        pass
    try:
        with engine.call() as client:
            client.images.pull(base)
        return True
    except DockerException:
        return False


def build_image(
    image: str = DEFAULT_IMAGE,
    *,
    method: str = "auto",
    force: bool = False,
    engine: ImageEngine,
    log: Callable[[str], None] = print,
) -> str:
    """Make `image` exist with `engine`; `method` is auto, dockerfile or offline. Returns the
    method used."""
    if not force and engine.has_image(image):
        log(f"sandbox image {image} already present")
        return "present"
    if method not in {"auto", "dockerfile", "offline"}:
        raise ConfigError(f"unknown build method {method!r}: use auto, dockerfile or offline")
    if method == "dockerfile" or (method == "auto" and _can_pull(engine, BASE_IMAGE)):
        log(f"building {image} from sandbox/Dockerfile ({BASE_IMAGE})")
        _build_dockerfile(engine, image)
        return "dockerfile"
    log(f"no registry reachable for {BASE_IMAGE}: building {image} offline")
    _import_rootfs(engine, build_rootfs(log=log), image)
    return "offline"
