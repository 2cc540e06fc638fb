"""The documented import path of the agent tools; they live in :mod:`django_wakes.agents`.

``from django_wakes import tools`` then ``tools.tool_definitions(...)`` and ``tools.dispatch(...)``.
"""

from __future__ import annotations

from .agents.tools import *  # noqa: F403
from .agents.tools import __all__  # noqa: F401
