#!/usr/bin/env python
"""The smoke's scratch project: a Django project of its own that installs django_jobs from a
wheel, as a user's project would."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smokesite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
