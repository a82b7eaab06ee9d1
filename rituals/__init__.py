"""Rituals: scheduled work composed from memory's parts. One lives here: reflect (weekly by
default, `[rituals] reflect`). The owner's own prompt rituals (`[[rituals.custom]]`) are
prompts, not code: the scheduler marks them due and the loop gives the prompt to the model in
a turn. Rituals call memory and the store; the loop never calls a ritual's internals."""
