from django.apps import AppConfig


class TestJobsConfig(AppConfig):
    """Job types the test suite drives, installed so that worker subprocesses know them too."""

    name = "testproject.testjobs"
    label = "testjobs"
    default_auto_field = "django.db.models.BigAutoField"
