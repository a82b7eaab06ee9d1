"""The owner's page at `/` (placeholder: being written)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..home import Home


def routes(home: Home, current: Any, limits: Any, wake: Callable[[Home], int | None]) -> list:
    return []
