"""`coworker eval work`: the work set (issue 39 item 2), asked of every door.

Owns the work set's questions and its home: a fresh temporary home holds the history of
`lab.work_set` (appended as the loop would have written it, then reflected offline and
extractive, as in life); the answers of each fact are the event ids its answering events got.
The asking, the report and its figures are `lab.eval_paraphrase`'s, the same for both sets:
search top 5, recall top 5, the recall block the loop would inject, the walk (found, refused,
answered wrongly), and for questions nothing answers the walk's refusals and the block's noise.
It reads; it never calls a chat model.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..home import Home
from .eval_paraphrase import (
    ParaphraseReport,
    Question,
    build_history_home,
    run_set,
    set_questions,
)

if TYPE_CHECKING:
    from ..memory.embed import Embedder


def work_questions(half: str = "all") -> list[Question]:
    """Every question of `half`: each fact's exact and paraphrase, then the unanswerable ones."""
    from .work_set import FACTS, UNANSWERABLE

    return set_questions(FACTS, UNANSWERABLE, half)


def build_work_home(root: Path, embedder: Embedder | None = None
                    ) -> tuple[Home, dict[str, set[int]], int]:
    """A fresh home holding the work set's history; each fact's answering event ids, and how
    many events there are."""
    from .work_set import FACTS, TAG, events

    home, keyed, n = build_history_home(root, events(), TAG, embedder)
    answers = {f.id: {i for key in f.answers for i in keyed[key]} for f in FACTS}
    return home, answers, n


def run_work(channels: str = "lexical", half: str = "all",
             progress: Callable[[str], None] | None = None,
             model: str | None = None) -> ParaphraseReport:
    """Ask the work set's questions of `half` through `channels`; `model`: with hybrid, the
    packaged local model to embed with."""
    return run_set(work_questions(half), build_work_home, channels, half, progress, model)
