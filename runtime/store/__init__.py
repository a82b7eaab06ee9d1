"""The only room that speaks SQL: connection, migrations, events, archive, rollups, decisions,
promotions, pins, ritual_runs, telemetry. It imports nothing of ours but errors and settings.
"""

from .db import Store
from .events import Event, iso_z, now_iso

__all__ = ["Event", "Store", "iso_z", "now_iso"]
