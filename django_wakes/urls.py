"""Include under any prefix: ``path("wakes/", include("django_wakes.urls"))``.

Approval links are then ``reverse("django_wakes:approve", args=[token])``.
"""

from django.urls import path

from . import views

app_name = "django_wakes"

urlpatterns = [
    path("approve/<str:token>/", views.approve, name="approve"),
]
