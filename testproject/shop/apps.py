from django.apps import AppConfig


class ShopConfig(AppConfig):
    """The example shop of docs/quickstart.md. Its models.py, payments.py and jobs.py are the
    quickstart's files, word for word, its views.py and urls.py those of docs/testing.md, and the
    other docs' snippets run against it."""

    name = "testproject.shop"
    label = "shop"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.conf import settings

        # docs/operations/tracing.md's Sentry recipe, where a test reports to Sentry: elsewhere its
        # receivers would make every other test's jobs send signals.
        if settings.SENTRY_EVENTS_FILE:
            from . import error_tracking  # noqa: F401
