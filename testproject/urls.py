from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("shop/", include("testproject.shop.urls")),  # the example shop's views (docs/testing.md)
]
