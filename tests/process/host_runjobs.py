"""``manage.py runjobs`` for a worker host: the project's command, with the job type of
tests/process/host_jobs.py registered first.

Run as ``python -m tests.process.host_runjobs [runjobs options]`` from the project's root.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django
    from django.core.management import execute_from_command_line

    django.setup()
    import tests.process.host_jobs  # noqa: F401  # registers hosts.counted_effect

    execute_from_command_line(["manage.py", "runjobs", *sys.argv[1:]])


if __name__ == "__main__":
    main()
