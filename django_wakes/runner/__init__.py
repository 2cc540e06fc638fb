"""The runner layer: the sweeper loop behind ``manage.py runwakes``, its push listener, async firer and outage log.

It calls the engine for every claim, settle and heartbeat; it never writes a wake itself.
"""

from __future__ import annotations

from .async_firer import AsyncFirer
from .connections import apply_client_timeouts, probe_sqlite_json_support
from .fire_threads import RunnerBroken
from .in_hand import SAFE_LEASE_FRACTION
from .sweeper import Sweeper

__all__ = [
    "SAFE_LEASE_FRACTION",
    "AsyncFirer",
    "RunnerBroken",
    "Sweeper",
    "apply_client_timeouts",
    "probe_sqlite_json_support",
]
