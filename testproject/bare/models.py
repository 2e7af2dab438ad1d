"""No tables: a receiver that enqueues the welcome task for each new user, as projects write
them. Importing it while the apps load brings in the Tasks framework, and with it (on Django
>= 6.0) the framework's checks of its backends."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db.models.signals import post_save
from django.dispatch import receiver

from testproject.bare.tasks import welcome


@receiver(post_save, sender=User)
def welcome_new_users(sender: type[User], instance: User, created: bool, **kwargs: Any) -> None:
    if created:
        welcome.enqueue(instance.pk)
