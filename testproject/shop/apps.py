from django.apps import AppConfig


class ShopConfig(AppConfig):
    """The example shop of docs/quickstart.md. Its models.py, payments.py and jobs.py are the
    quickstart's files, word for word, its views.py and urls.py those of docs/testing.md, and the
    other docs' snippets run against it."""

    name = "testproject.shop"
    label = "shop"
    default_auto_field = "django.db.models.BigAutoField"
