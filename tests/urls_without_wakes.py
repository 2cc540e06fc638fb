"""A URLconf without django-wakes' approval pages, for the checks that depend on them."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
