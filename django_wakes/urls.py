"""Include under any prefix: ``path("wakes/", include("django_wakes.urls"))``.

Approval links are then ``reverse("django_wakes:approve", args=[token])``: that URL keeps the
token's hash in the session and redirects to the token-free ``django_wakes:answer`` page, which
needs a logged-in user (so the project needs a login view and ``settings.LOGIN_URL``).
"""

from django.urls import path

from . import views

app_name = "django_wakes"

urlpatterns = [
    path("approve/answer/", views.answer, name="answer"),  # before the token pattern, which would match it
    path("approve/<str:token>/", views.approve, name="approve"),
]
