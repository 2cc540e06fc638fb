from django.contrib import admin
from django.urls import include, path

from testproject import agent_views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("wakes/", include("django_wakes.urls")),  # with its login page: settings.LOGIN_URL = "django_wakes:login"
    path("agent/", agent_views.agent, name="agent"),  # the async API from an async view (tests/test_async_api.py)
]
