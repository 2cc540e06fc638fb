"""Include under any prefix: ``path("wakes/", include("django_wakes.urls"))``.

Approval links are then ``reverse("django_wakes:approve", args=[token])``: that URL keeps the
token's hash in a signed cookie and redirects to the token-free ``django_wakes:answer`` page (a token
of no approval waiting for its answer goes to ``django_wakes:refused`` instead, with nothing kept),
which needs a logged-in user: ``settings.LOGIN_URL`` names the login page. A project without one of
its own sets ``LOGIN_URL = "django_wakes:login"``: Django's ``LoginView`` with a template this app
ships (``django_wakes/login.html``) and a throttle on failed logins (:mod:`django_wakes.web.login`),
so the first click on an approval link works with no template of the project's (system checks
``django_wakes.W005``/``W006`` catch a ``LOGIN_URL`` that leads nowhere).

Programs answer through ``django_wakes:approval_api`` (JSON, :mod:`django_wakes.web.approval_api`), and senders of
events post to ``django_wakes:event_webhook`` (``events/<source>/``, signed, :mod:`django_wakes.web.webhooks`;
every source is refused with 404 until ``WAKES["WEBHOOKS"]`` configures it).

Agent runtimes reach the tools over MCP (streamable HTTP) at ``django_wakes:mcp`` (``mcp/``,
:mod:`django_wakes.agents.mcp_server`; 404 until ``WAKES["MCP_AUTH"]`` is set).

Prometheus scrapes ``django_wakes:metrics`` (``metrics/``, :mod:`django_wakes.console.metrics`) with a bearer
token from ``WAKES["METRICS_TOKENS"]``; staff who may view wakes can read it in a browser.
"""

from django.urls import path

from .agents import mcp_server
from .console import metrics
from .web import approval_api as api
from .web import approval_pages as views
from .web import login, webhooks

app_name = "django_wakes"

urlpatterns = [
    path("approve/answer/", views.answer, name="answer"),  # before the token pattern, which would match it
    path("approve/refused/<slug:reason>/", views.refused, name="refused"),  # where a link that opens nothing goes
    path("approve/<str:token>/", views.approve, name="approve"),
    path("login/", login.ThrottledLoginView.as_view(), name="login"),  # LOGIN_URL's choice; throttled (web/login.py)
    path("approvals/api/", api.approval_api, name="approval_api"),
    path("events/<str:source>/", webhooks.event_webhook, name="event_webhook"),
    path("metrics/", metrics.metrics_view, name="metrics"),  # Prometheus; bearer token or staff (metrics.py)
    path("mcp/", mcp_server.mcp_view, name="mcp"),  # the agent tools over MCP; WAKES["MCP_AUTH"] (agents/)
    path(  # RFC 9728 metadata, named by the 401's WWW-Authenticate
        "mcp/oauth-protected-resource/", mcp_server.resource_metadata_view, name="mcp_resource_metadata"
    ),
]
