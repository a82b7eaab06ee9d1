"""coworker: an AI coworker that lives in a background process, wakes on a tick and remembers.

The package is a house of rooms (docs/design.md section 15): cli -> loop -> (context, model, tools)
-> memory -> store. Arrows run one way; the store knows nothing of the loop.
"""

__version__ = "0.1.0"
