from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client


@pytest.fixture
def login(client: Client) -> Callable[[User | None], Client]:
    """Log the test client in as a user (or out, with None)."""

    def as_user(user: User | None) -> Client:
        client.logout()
        if user is not None:
            client.force_login(user)
        return client

    return as_user


@pytest.fixture
def superuser() -> User:
    return User.objects.create_superuser("root", "root@example.com", "pw")
