"""Which GitHub event a signed body is: ``X-GitHub-Event`` is not signed, so it is believed as the body confirms it.

GitHub signs the body alone. Anyone who captured one signed body can send it again with another
``X-GitHub-Event``: a ``check_suite`` body sent as ``push`` verifies all the same. So the event name a
``MAP`` sees (``delivery.event_type``) is the header's only when the body has the shape GitHub gives
that event (its documented payloads, "Webhook events and payloads"):

* an event in :data:`SHAPES` must have every top-level key it lists as ``needs`` and none it lists as
  ``not``; a body that does not is refused (400 ``event_mismatch``): GitHub never sends one, so it
  can only be a signed body under a name it was not signed with;
* any other event is confirmed when the body has a top-level key named after it (``release``,
  ``workflow_run``, ``deployment``, ``discussion``, ... carry their object under their own name);
  when it has none, ``event_type`` is ``None`` (the delivery is acknowledged, and a ``MAP`` that
  looks for a name acts on nothing). Keys every body may carry (:data:`ENVELOPE`: ``repository``,
  ``organization``, ``installation``, ``sender``, ...) confirm nothing: the ``repository`` or
  ``installation`` events are ``None``.

The ``not`` keys tell apart events whose bodies share an object: a ``pull_request`` body has no
``review``, ``comment`` or ``thread`` (``pull_request_review``, ``pull_request_review_comment`` and
``pull_request_review_thread`` bodies carry the pull request too); ``issues`` has no ``comment``
(``issue_comment`` has the issue too); ``deployment`` has no ``deployment_status``; ``create`` has
``master_branch`` and ``delete`` does not; ``check_run`` is not a ``deployment_status`` (which may
carry its check run) and ``workflow_run`` not a ``deployment`` (which carries its run).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .base import EventMismatch


@dataclass(frozen=True)
class Shape:
    """The top-level keys an event's body has (``needs``) and those it never has (``not_``)."""

    needs: frozenset[str]
    not_: frozenset[str] = frozenset()


def _shape(needs: str, not_: str = "") -> Shape:
    return Shape(frozenset(needs.split()), frozenset(not_.split()))


#: Keys most bodies carry (who, where): an event named like one is never confirmed by that key alone.
ENVELOPE = frozenset({"action", "repository", "organization", "installation", "enterprise", "sender"})

#: Events whose body is told by more than a key of their own name (or shares one with another event).
SHAPES: dict[str, Shape] = {
    "ping": _shape("zen hook_id"),
    "push": _shape("ref before after commits"),
    "create": _shape("ref ref_type master_branch"),
    "delete": _shape("ref ref_type", "master_branch"),
    "status": _shape("sha state context"),
    "check_suite": _shape("check_suite", "check_run"),
    "check_run": _shape("check_run", "deployment_status"),
    "issues": _shape("issue", "comment"),
    "issue_comment": _shape("issue comment"),
    "pull_request": _shape("pull_request", "review comment thread"),
    "pull_request_review": _shape("pull_request review"),
    "pull_request_review_comment": _shape("pull_request comment"),
    "pull_request_review_thread": _shape("pull_request thread"),
    "deployment": _shape("deployment", "deployment_status"),
    "deployment_status": _shape("deployment_status deployment"),
    "workflow_run": _shape("workflow_run", "workflow_job deployment"),
    "workflow_job": _shape("workflow_job"),
}


def confirmed(event: str | None, body: Mapping[str, Any]) -> str | None:
    """Return ``event`` if ``body`` confirms it, ``None`` if nothing can; :class:`EventMismatch` if it contradicts."""
    if not event:
        return None
    shape = SHAPES.get(event)
    if shape is None:
        return event if event in body and event not in ENVELOPE else None
    if shape.needs <= body.keys() and not shape.not_ & body.keys():
        return event
    raise EventMismatch(event)
