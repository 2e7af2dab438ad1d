"""The smoke's checks that need the project loaded, one step each, run by release/smoke.py
between the real commands (migrate, runjobs, collectstatic, jobsselftest) in this order:

- ``where``: django_jobs is the wheel's, installed in this virtualenv, and nothing of the
  checkout is on the path;
- ``enqueue``: a job, a chain of two steps and a task of Django's Tasks framework;
- ``outcomes``: after ``runjobs --burst``, each completed with the value its handler returned;
- ``console``: the admin's pages of the console render, from the wheel's templates, with every
  static file they link to collected.

What one step learns for a later one (the ids it enqueued) is kept in smoke-state.json.
"""

from __future__ import annotations

import json
import os
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import django
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

import django_jobs

STATE = Path(settings.BASE_DIR) / "smoke-state.json"
DISTRIBUTION = "django-jobs-pg"
PASSWORD = "smoke-password"
#: The console's own templates each of its pages below must have rendered between them.
CONSOLE_TEMPLATES = {
    "admin/django_jobs/job/change_list.html",
    "admin/django_jobs/job/change_form.html",
    "admin/django_jobs/job/dashboard.html",
    "admin/django_jobs/job/workflow.html",
    "admin/django_jobs/job/bulk_operations.html",
    "admin/django_jobs/scheduletick/change_list.html",
    "admin/django_jobs/_style.html",
}


class Command(BaseCommand):
    help = "One step of the wheel's smoke test (release/smoke.py runs them)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("step", choices=["where", "enqueue", "outcomes", "console"])

    def handle(self, *args: Any, step: str, **options: Any) -> None:
        getattr(self, step)()

    def expect(self, condition: bool, failure: str) -> None:
        if not condition:
            raise CommandError(failure)

    def where(self) -> None:
        package = Path(django_jobs.__file__).resolve().parent
        self.expect(
            package.is_relative_to(Path(sys.prefix).resolve()),
            f"django_jobs is imported from {package}, not from this virtualenv ({sys.prefix})",
        )
        # Nothing of the checkout the wheel was built from is importable here.
        checkout = Path(os.environ["SMOKE_CHECKOUT"]).resolve()
        inside = [entry for entry in sys.path if Path(entry or ".").resolve().is_relative_to(checkout)]
        self.expect(not inside, f"sys.path reaches into the checkout {checkout}: {inside}")
        installed = metadata.distribution(DISTRIBUTION)
        version = installed.version
        self.expect(
            version == django_jobs.__version__, f"{DISTRIBUTION} {version} != {django_jobs.__version__}"
        )
        # pip writes how it installed a distribution: from an archive (the wheel), not a checkout.
        origin = json.loads(installed.read_text("direct_url.json") or "{}")
        self.expect(
            "archive_info" in origin and origin.get("url", "").endswith(".whl"),
            f"{DISTRIBUTION} was not installed from a wheel: {origin}",
        )
        self.stdout.write(
            f"django_jobs {version} from {package} "
            f"(Python {sys.version.split()[0]}, Django {django.__version__})"
        )

    def enqueue(self) -> None:
        from django_jobs import Step, enqueue, enqueue_chain
        from smokeapp.tasks import multiply

        job = enqueue("smoke.add", {"a": 2, "b": 3})
        workflow = enqueue_chain(Step("smoke.add", {"a": 1, "b": 1}), Step("smoke.add", {"a": 4, "b": 4}))
        result = multiply.enqueue(6, 7)
        STATE.write_text(json.dumps({"job": job.id, "workflow": workflow.id, "task": str(result.id)}))
        self.stdout.write(f"enqueued job {job.id}, workflow {workflow.id}, task {result.id}")

    def outcomes(self) -> None:
        from django_jobs.models import Job
        from smokeapp.tasks import multiply

        state = json.loads(STATE.read_text())
        job = Job.objects.get(id=state["job"])
        self.expect(
            (job.status, job.return_value) == ("completed", {"sum": 5}),
            f"job {job.id}: {job.status}, {job.return_value!r}",
        )
        steps = Job.objects.filter(workflow_id=state["workflow"]).order_by("id")
        ended = [(step.status, step.return_value) for step in steps]
        self.expect(
            ended == [("completed", {"sum": 2}), ("completed", {"sum": 8})], f"the chain's steps: {ended}"
        )
        result = multiply.get_result(state["task"])
        self.expect(
            (result.status.name, result.return_value) == ("SUCCESSFUL", 42),
            f"task {result.id}: {result.status}, {result.return_value!r}",
        )
        self.stdout.write("the job, the chain's two steps and the task completed with their values")

    def console(self) -> None:
        from django.test import Client
        from django.test.utils import setup_test_environment

        setup_test_environment()  # the test client then records the templates each page rendered
        state = json.loads(STATE.read_text())
        get_user_model().objects.create_superuser("smoke", "smoke@example.com", PASSWORD)
        client = Client()
        self.expect(client.get("/admin/login/").status_code == 200, "the admin's login page")
        login = client.post("/admin/login/", {"username": "smoke", "password": PASSWORD, "next": "/admin/"})
        self.expect(login.status_code == 302 and login["Location"] == "/admin/", "logging in to the admin")
        pages = [
            "/admin/",
            "/admin/django_jobs/job/",
            "/admin/django_jobs/job/?status=completed&queue=default",
            f"/admin/django_jobs/job/{state['job']}/change/",
            "/admin/django_jobs/job/dashboard/",
            f"/admin/django_jobs/job/workflow/{state['workflow']}/",
            "/admin/django_jobs/job/operations/",
            "/admin/django_jobs/scheduletick/",
        ]
        rendered: set[tuple[str, str]] = set()
        linked: set[str] = set()
        for page in pages:
            response = client.get(page)
            self.expect(response.status_code == 200, f"{page} answered {response.status_code}")
            rendered |= {(t.name, t.origin.name) for t in response.templates if t.name and t.origin}
            html = response.content.decode()
            linked |= set(re.findall(rf'(?:href|src)="{settings.STATIC_URL}([^"?#]+)', html))
        self.check_templates(rendered)
        self.check_static(linked)
        self.stdout.write(
            f"{len(pages)} pages of the console answered 200, rendering {len(rendered)} templates; "
            f"the {len(linked)} static files they link to were collected"
        )

    def check_templates(self, rendered: set[tuple[str, str]]) -> None:
        package = Path(django_jobs.__file__).resolve().parent
        names = {name for name, _ in rendered}
        missing = CONSOLE_TEMPLATES - names
        self.expect(not missing, f"the console's pages did not render {sorted(missing)}")
        for name, origin in rendered:
            if name.startswith("admin/django_jobs/"):
                self.expect(
                    Path(origin).resolve().is_relative_to(package), f"{name} was loaded from {origin}"
                )

    def check_static(self, linked: set[str]) -> None:
        from django.contrib.staticfiles import finders

        root = Path(settings.STATIC_ROOT)
        self.expect(bool(linked), "the console's pages link to no static file")
        absent = sorted(path for path in linked if not (root / path).is_file())
        self.expect(not absent, f"linked but not collected: {absent}")
        # The package's own static files, if it has any, are found and were collected.
        package = Path(django_jobs.__file__).resolve().parent / "static"
        for path in package.rglob("*") if package.is_dir() else []:
            if path.is_file():
                relative = path.relative_to(package).as_posix()
                self.expect(finders.find(relative) is not None, f"{relative}: no finder finds it")
                self.expect((root / relative).is_file(), f"{relative}: not collected")
