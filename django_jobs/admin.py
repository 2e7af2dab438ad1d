"""Where Django's admin looks for an app's ModelAdmins (``admin.autodiscover()`` imports
``<app>.admin``): importing the console registers it. The console lives in
:mod:`django_jobs.console`."""

from django_jobs.console import admin as console_admin

__all__ = ["console_admin"]
