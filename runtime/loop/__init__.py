"""The tick loop: perceive, decide, act, record. It only re-exports; the rooms are:

- lifecycle: the Loop (run state, `async with` start and stop, signals, the sleep a wake-up
  cuts short, the interval, the runfile, config reload, the choice between a quiet tick and
  a turn);
- perception: what waits (due promises, due rituals, the inbox through `inbox`), the batch
  one turn takes, and its fingerprint;
- turn: one turn from its `tick` event to its `tick_end` (model steps, replay, tools, recall,
  failure accounting), with the spending cap in `spending`;
- state: the closed sets (run state, tick outcomes) and the stop signal; record: the loop's
  own events.

The arrows run one way: lifecycle -> perception and turn -> context, model, tools, memory and
the store. Nothing here speaks SQL, and the store knows nothing of the loop.
"""

from .lifecycle import Loop, LoopStats
from .state import Outcome, RunState, Stop, TickOutcome
from .turn import TickWork

__all__ = ["Loop", "LoopStats", "Outcome", "RunState", "Stop", "TickOutcome", "TickWork"]
