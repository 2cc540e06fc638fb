from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("wakes/", include("django_wakes.urls")),  # with its login page: settings.LOGIN_URL = "django_wakes:login"
]
