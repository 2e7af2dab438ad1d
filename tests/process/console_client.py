"""A process of the test project that serves its console to a test, through Django's test client,
with the databases its environment names (``DATABASE_URL``, ``CONSOLE_DATABASE_URL``): the test
process's own connections point at the shared server, this one's at a throwaway cluster.

One JSON request per line on stdin, one JSON answer per line on stdout:

- ``{"get": path}`` and ``{"post": path, "data": {...}}`` (redirects followed) → ``{"status",
  "body"}``, as a signed-in superuser;
- ``{"retry": job_id}`` → ``{"left": status}``: another operator's retry from Python
  (``django_jobs.retry``), which goes where every action goes.

Run as ``python -m tests.process.console_client`` from the checkout.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def answer(request: dict[str, Any], client: Any) -> dict[str, Any]:
    from django_jobs import retry

    if "retry" in request:
        return {"left": retry(request["retry"], reason="fixed upstream", actor="another-operator")}
    if "get" in request:
        response = client.get(request["get"])
    else:
        response = client.post(request["post"], request["data"], follow=True)
    return {"status": response.status_code, "body": response.content.decode()}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.test import Client

    user = User.objects.create_superuser("operator", "operator@example.com", "pw")
    client = Client()
    client.force_login(user)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        print(json.dumps(answer(json.loads(line), client)), flush=True)


if __name__ == "__main__":
    main()
