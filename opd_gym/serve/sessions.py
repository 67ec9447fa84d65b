"""SessionServer: OpenEnv's HTTPEnvServer, with a session busy in a step never counted idle.

OpenEnv 0.3.0 stamps a session's activity only after a message is answered, so its idle
reaper would reclaim a session whose step (a long command, grading) outlasts the timeout.
Here a session is marked busy for the length of each call and stamped again after it; the
reaper, the sessions and the wire format stay OpenEnv's (pinned: these are its fields).
"""

from __future__ import annotations

import math
import time
from typing import Any

from openenv.core.env_server.http_server import HTTPEnvServer


class SessionServer(HTTPEnvServer):
    """HTTPEnvServer whose idle clock does not run while a session's call is in progress."""

    async def _run_in_session_executor(self, session_id: str, func: Any, *args: Any,
                                       **kwargs: Any) -> Any:
        """Run a session's call with its idle clock stopped, then stamp its activity."""
        info = self._session_info.get(session_id)
        if info is not None:
            info.last_activity_at = math.inf  # busy: never older than the timeout
        try:
            return await super()._run_in_session_executor(session_id, func, *args, **kwargs)
        finally:
            if info is not None:
                info.last_activity_at = time.time()

    @property
    def session_ids(self) -> list[str]:
        """The ids of the sessions open now (for status and tests)."""
        return list(self._sessions)


__all__ = ["SessionServer"]
