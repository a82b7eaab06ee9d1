"""Rituals: scheduled work composed from memory's parts (reflect, weekly; the owner's own
prompt rituals). Rituals call memory and the store; the loop never calls a ritual's internals."""
