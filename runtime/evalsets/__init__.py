"""Evaluation sets written by hand and committed before any tuning (issue 14): the data and the
histories they are asked of. `coworker eval paraphrase` (runtime/eval_paraphrase.py) runs them;
nothing here touches a store or calls a model."""
