"""Notify: replies (and, when a target asks, approvals waiting and failures) reach the owner where
they are, through each `[[notify]]` target: a webhook (a JSON body in a preset's shape) or a
command (the message on standard input).

`presets` shapes a message for Slack, Discord, Mattermost, ntfy or a generic receiver and meets
each one's length limit by cutting with a marker that names the event; `senders` resolves a
target (its `secret:NAME` values read and registered for redaction) and makes one attempt;
`deliver` is the delivery pass (new events -> rows in runtime/store/deliveries.py, due rows
sent, failures backed off through tenacity and given up after a bound) and the background
thread the loop starts, so a delivery never blocks a tick. At least once: a row is marked
delivered only after its send succeeded, and every attempt of a row carries the same
idempotency key, so a receiver can drop a repeat.
"""

from .deliver import Notifier, send_test

__all__ = ["Notifier", "send_test"]
