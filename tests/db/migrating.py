"""Moving the test database between migrations, for the tests of a migration and its way back."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate(target: tuple[str, str]) -> None:
    """Migrate the test database to ``target`` (an app label and a migration name)."""
    MigrationExecutor(connection).migrate([target])


@contextlib.contextmanager
def migrated_to(target: tuple[str, str]) -> Iterator[None]:
    """The test database at ``target`` for the block, then at the latest migrations again."""
    migrate(target)
    try:
        yield
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
