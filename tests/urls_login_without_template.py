"""A URLconf as the docs once said to wire it: Django's ``LoginView`` at LOGIN_URL, and no template for it.

The project has no ``registration/login.html`` (neither has the testproject), so this login page is a 500:
system check ``django_wakes.W006`` says so. ``admin-login/`` is the same view given the admin's template.
"""

from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", LoginView.as_view(), name="login"),
    path("admin-login/", LoginView.as_view(template_name="admin/login.html"), name="admin_login"),
    path("wakes/", include("django_wakes.urls")),
]
