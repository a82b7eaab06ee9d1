"""The lab: the benches and evaluations that measure the product, kept beside it.

Owns `coworker bench` and `coworker eval` (their click commands are `lab.commands`, registered on
the CLI by one hook in runtime/cli.py), the runs behind them (`bench`, `bench_semantic`,
`bench_long`, `evaluate`, `eval_paraphrase`, `history`) and the evaluation sets as data files
(`lab/data/*.json`, read by `paraphrase_set`). The lab imports the product (the store, memory,
the importer, `runtime.synth`); nothing in the product imports the lab (tests/test_rooms.py
checks every module's imports). It never touches a home but its own temporary ones.

This file holds only the names the commands offer, so that registering them loads no run.
"""

CHANNELS = ("lexical", "hybrid", "bm25")  # `eval --channels`
LOCAL_MODELS = ("all-minilm", "all-mpnet")  # the packaged local embedders (`--model`)
PARAPHRASE_HALVES = ("tuning", "held", "all")  # `eval paraphrase --half`
