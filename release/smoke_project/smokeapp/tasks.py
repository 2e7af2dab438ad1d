try:
    from django.tasks import task  # Django 6
except ImportError:  # Django 5.2, with the backport
    from django_tasks import task


@task
def multiply(a: int, b: int) -> int:
    return a * b
