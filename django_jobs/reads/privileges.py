"""What the connected database role may do to the job tables, asked before anything is written.

A command that writes several tables (the self-test enqueues, runs and removes jobs) asks
first, so that a role without a privilege is told which one it lacks, instead of failing
half-way with a partial run to clean up. PostgreSQL answers from its catalogue
(``has_table_privilege``): no table is read, nothing is locked.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connections

from django_jobs.conf import primary_database

#: Each (table, privilege) pair asked for that the role does not hold.
_MISSING = """
SELECT w.tab, w.privilege
FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS w(tab, privilege, n)
WHERE NOT has_table_privilege(w.tab, w.privilege)
ORDER BY w.n
"""
_ROLE = "SELECT current_user"


def role() -> str:
    """The role the jobs database is used as."""
    with connections[primary_database()].cursor() as cursor:
        cursor.execute(_ROLE)
        return str(cursor.fetchone()[0])


def missing(wanted: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The ``(table, privilege)`` pairs of ``wanted`` (``("django_jobs_job", "INSERT")``) that
    the role does not hold on the primary jobs database, in the order asked."""
    tables = [table for table, _ in wanted]
    privileges = [privilege for _, privilege in wanted]
    with connections[primary_database()].cursor() as cursor:
        cursor.execute(_MISSING, [tables, privileges])
        return [(str(table), str(privilege)) for table, privilege in cursor.fetchall()]
