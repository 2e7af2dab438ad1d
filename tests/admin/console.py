"""What the console's tests share: its URLs and members of staff with given permissions."""

from __future__ import annotations

from django.contrib.auth.models import Permission, User

LIST = "/admin/django_jobs/job/"
DASHBOARD = "/admin/django_jobs/job/dashboard/"


def act_url(action: str, *ids: int) -> str:
    return f"/admin/django_jobs/job/act/{action}/?ids={','.join(map(str, ids))}"


def detail_url(job_id: int) -> str:
    return f"{LIST}{job_id}/change/"


def staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="django_jobs", codename__in=codenames)
    )
    return user
