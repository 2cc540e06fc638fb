"""Include under any prefix: ``path("wakes/", include("django_wakes.urls"))``.

Approval links are then ``reverse("django_wakes:approve", args=[token])``: that URL keeps the
token's hash in the session and redirects to the token-free ``django_wakes:answer`` page, which
needs a logged-in user (so the project needs a login view and ``settings.LOGIN_URL``).

Programs answer through ``django_wakes:approval_api`` (JSON, :mod:`django_wakes.web.approval_api`), and senders of
events post to ``django_wakes:event_webhook`` (``events/<source>/``, signed, :mod:`django_wakes.web.webhooks`;
every source is refused with 404 until ``WAKES["WEBHOOKS"]`` configures it).

Prometheus scrapes ``django_wakes:metrics`` (``metrics/``, :mod:`django_wakes.console.metrics`) with a bearer
token from ``WAKES["METRICS_TOKENS"]``; staff who may view wakes can read it in a browser.
"""

from django.urls import path

from .console import metrics
from .web import approval_api as api
from .web import approval_pages as views
from .web import webhooks

app_name = "django_wakes"

urlpatterns = [
    path("approve/answer/", views.answer, name="answer"),  # before the token pattern, which would match it
    path("approve/<str:token>/", views.approve, name="approve"),
    path("approvals/api/", api.approval_api, name="approval_api"),
    path("events/<str:source>/", webhooks.event_webhook, name="event_webhook"),
    path("metrics/", metrics.metrics_view, name="metrics"),  # Prometheus; bearer token or staff (metrics.py)
]
