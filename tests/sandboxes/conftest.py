"""Fixtures giving a started sandbox of each backend (Docker ones are marked `docker`)."""

from __future__ import annotations

import warnings

import pytest

from opd_gym.sandboxes import sandbox_factory

BACKENDS = [
    pytest.param("docker", marks=pytest.mark.docker),
    "bwrap",
    "local",
]


def open_sandbox(backend: str, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the local backend's isolation warning
        sandbox = sandbox_factory({"backend": backend, **options})()
        sandbox.start()
    return sandbox


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def sandbox(backend):
    sb = open_sandbox(backend)
    yield sb
    sb.close()


@pytest.fixture
def make_sandbox(backend):
    """Open sandboxes of the current backend with options; all closed after the test."""
    opened = []

    def make(**options):
        opened.append(open_sandbox(backend, **options))
        return opened[-1]

    yield make
    for sb in opened:
        sb.close()
