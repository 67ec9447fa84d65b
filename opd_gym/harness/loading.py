"""Import mini-swe-agent offline: no banner, no cost-map download, no cost errors."""

from __future__ import annotations

import os
from types import ModuleType

from opd_gym.harness.errors import HarnessNotInstalled

MINI_SWE_AGENT_VERSION = "2.4.6"  # the pinned release (pyproject's `harness` extra)

# set before the first import: minisweagent and litellm read these at import time
OFFLINE_ENV = {
    "MSWEA_SILENT_STARTUP": "1",            # no banner on stdout
    "MSWEA_COST_TRACKING": "ignore_errors",  # a local model has no price: cost 0, no error
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # never fetch the price list over the network
    "LITELLM_TELEMETRY": "False",
}


def load_minisweagent() -> ModuleType:
    """The `minisweagent` package, imported with the offline settings; clear error if absent."""
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    try:
        import litellm
        import minisweagent
    except ImportError as exc:
        raise HarnessNotInstalled(
            f"--harness mini-swe-agent needs mini-swe-agent=={MINI_SWE_AGENT_VERSION} and "
            f"litellm ({exc}); run scripts/setup.sh (the 'harness' extra) or pip install "
            f"--no-deps mini-swe-agent=={MINI_SWE_AGENT_VERSION} litellm") from exc
    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return minisweagent
