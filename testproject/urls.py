from django.contrib import admin
from django.urls import include, path
from health_check.views import HealthCheckView

from testproject.testjobs.views import urlpatterns_durable

urlpatterns = [
    path("admin/", admin.site.urls),
    path("jobs/", include("django_jobs.urls")),  # /jobs/metrics (docs/operations/metrics.md)
    path("shop/", include("testproject.shop.urls")),  # the example shop's views (docs/testing.md)
    # A durable order flow and its payment webhook (tests/process/test_durable_http.py).
    *[path(f"durable/{route}", view) for route, view in urlpatterns_durable],
    # As docs/operations/diagnosis.md sets it up (*The health check plugin*).
    path(
        "health/", HealthCheckView.as_view(checks=["django_jobs.health.JobsHealthCheck"]), name="health_check"
    ),
]
