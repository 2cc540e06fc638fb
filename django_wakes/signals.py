"""Django signals hosts can hook for metrics and side channels. All are sent after commit."""

from __future__ import annotations

from django.dispatch import Signal

#: A wake was created (``wake``). Sent on commit of the creating transaction.
wake_created = Signal()
#: Wakes became due now through a trigger (``due_at``): an event or an answer arrived.
wakes_due = Signal()
#: A wake's sink returned normally (``wake``, ``outcome``: fired, expired or stopped).
wake_fired = Signal()
#: A wake's sink raised or asked to retry (``wake``, ``error``, ``retry_at``).
wake_failed = Signal()
#: A wake exhausted its attempts and went to the dead letter (``wake``, ``error``).
wake_dead = Signal()
#: A recurring chain will never fire some of its slots (``wake``: the occurrence that stood for them;
#: ``missed``: how many slots; ``policy``: the chain's catch-up, ``latest`` or ``skip``). Operators alert on it.
occurrences_missed = Signal()
