"""The only room that speaks SQL. It imports nothing of ours but errors and settings.

One module a table or a ledger: the connection (`db`), the schema (`migrations`), the event log
and its vocabulary (`events`: Event, AUTHOR_KINDS, BOOKKEEPING_KINDS, LOOP_STATE_KINDS, the
FTS5 primitive), the `archive` move, the ladder (`rollups`), `decisions`, `promotions`, `pins`,
`tags`, `vectors`, the loop's ledgers (`inputs`, `side_effects`, `import_keys`, `redactions`),
what it reads back of its own runs (`turns`, `promises`, `rituals`, `usage`, `strikes`) and
`telemetry`; what the rooms above ask of the engine itself: `backup_queries` (a backup's copy,
check and counts), `health` (doctor's checks and repair commands) and `lab_queries` (the lab's
reads and bulk loads); the FTS5 reads memory keeps counts of (`fts`: documented interfaces
only, never a shadow table).
This file only re-exports the names every caller needs.
"""

from .db import Store
from .events import Event, iso_z, now_iso

__all__ = ["Event", "Store", "iso_z", "now_iso"]
