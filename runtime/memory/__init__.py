"""Memory: ladder (sealing), walk (pure), recall (the reflex), search, gate, memory map.

Memory reads and writes the store; it never imports the model. Where a summary needs one, the
ritual passes a `summarize` callable in.
"""
