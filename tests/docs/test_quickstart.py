"""docs/quickstart.md, followed to the letter on a fresh project and a fresh database.

Every block of the page is run in order, as a reader would: its commands in a shell, its files
written where it says, its shell snippets piped to ``manage.py shell`` (and what they print
compared with the page's ``# expected`` comments), its console opened by ``runserver`` and
looked at over HTTP. A command the test does not know fails it, so the page cannot grow a step
nobody runs.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.conf import settings

from tests.docs.snippets import CHECKOUT, DISTRIBUTION, ROOT, Block, blocks

QUICKSTART = ROOT / "docs" / "quickstart.md"
PYTHON = sys.executable
BIN = Path(PYTHON).parent
#: Steps the test's own virtualenv has already taken (the install line is checked, not repeated).
DONE_BY_THE_TEST_RUN = {"python -m venv .venv", ". .venv/bin/activate"}
PASSWORD = "quickstart-password"
#: A fresh project, a fresh database, some fifteen processes: half a minute.
pytestmark = pytest.mark.slow


@pytest.fixture
def database() -> Iterator[dict[str, str]]:
    """A fresh database on the test server, in place of the quickstart's ``shop``."""
    server = settings.DATABASES["default"]
    name = f"{os.environ.get('TEST_DATABASE_NAME') or 'test_django_jobs'}_quickstart"
    params = {
        "NAME": name,
        "HOST": server["HOST"] or "127.0.0.1",
        "PORT": str(server["PORT"] or 5432),
        "USER": server["USER"] or "postgres",
        "PASSWORD": server["PASSWORD"] or "",
    }
    admin = admin_dsn(params)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    yield params
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def admin_dsn(db: dict[str, str]) -> str:
    """A connection to the server's maintenance database, to create and drop ``db``."""
    dsn = f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname=postgres"
    return f"{dsn} password={db['PASSWORD']}" if db["PASSWORD"] else dsn


class Reader:
    """Follows the page in ``project``: one method per kind of step."""

    def __init__(self, project: Path, database: dict[str, str]) -> None:
        self.project = project
        self.database = database
        self.in_shell = False
        self.env = {
            key: value
            for key, value in os.environ.items()
            if key != "DJANGO_SETTINGS_MODULE" and not key.startswith("DJANGO_JOBS_")
        }
        self.env.update(
            PYTHONUNBUFFERED="1", DJANGO_SUPERUSER_PASSWORD=PASSWORD, PGPASSWORD=database["PASSWORD"]
        )

    def run(self, args: list[str], *, stdin: str | None = None, timeout: float = 120) -> str:
        result = subprocess.run(
            args, cwd=self.project, env=self.env, input=stdin, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"{shlex.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout

    # ---- the kinds of blocks ------------------------------------------------------------------

    def command(self, line: str, block: Block) -> None:
        if line in DONE_BY_THE_TEST_RUN:
            return
        words = shlex.split(line)
        if words[:2] == ["pip", "install"]:
            self.pip_install(words[2:])
        elif words[:1] == ["django-admin"]:
            self.run([str(BIN / "django-admin"), *words[1:]])
        elif words[:1] == ["createdb"]:
            self.createdb(words)
        elif words[:2] == ["python", "manage.py"]:
            self.manage(words[2:])
        else:
            raise AssertionError(f"{block}: the test does not know how to run {line!r}")

    def pip_install(self, targets: list[str]) -> None:
        """The page's install line installs this checkout's distribution: pip, asked what it
        would install from it, names the distribution pyproject.toml builds. The package itself
        is already in the test's virtualenv, installed from the same checkout."""
        assert targets == [CHECKOUT], f"the page installs {targets}, not a checkout at {CHECKOUT}"
        report = self.project / "pip-report.json"
        pip = [PYTHON, "-m", "pip", "install", "--dry-run", "--no-deps", "--quiet", "--report", str(report)]
        self.run([*pip, str(ROOT)], timeout=300)
        would_install = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
        assert would_install == [DISTRIBUTION]
        report.unlink()

    def createdb(self, words: list[str]) -> None:
        assert words == ["createdb", "-h", "127.0.0.1", "-U", "postgres", "shop"]
        db = self.database
        if shutil.which("createdb") is None:  # PostgreSQL's client programs are not installed here
            with psycopg.connect(self.admin_dsn(), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{db["NAME"]}"')
            return
        self.run(["createdb", "-h", db["HOST"], "-p", db["PORT"], "-U", db["USER"], db["NAME"]])

    def admin_dsn(self) -> str:
        return admin_dsn(self.database)

    def manage(self, args: list[str]) -> None:
        if args == ["shell"]:
            self.in_shell = True  # the snippets that follow are typed into it
        elif args == ["runjobs", "--until-settled"]:
            self.run_jobs_until_settled()
        elif args == ["createsuperuser"]:
            self.run([PYTHON, "manage.py", "createsuperuser", "--noinput", "--username", "admin",
                      "--email", "admin@example.com"])  # fmt: skip
        elif args == ["runserver"]:
            self.look_at_the_console()
        else:
            self.run([PYTHON, "manage.py", *args])

    def settings_file(self, block: Block) -> None:
        assert block.file == "mysite/settings.py"
        db = self.database
        with (self.project / block.file).open("a") as settings_py:
            settings_py.write("\n" + block.body)
            # The one departure from the page: the test's database server and a database of its own.
            settings_py.write(
                f'\nDATABASES["default"].update(NAME={db["NAME"]!r}, HOST={db["HOST"]!r}, '
                f"PORT={db['PORT']!r}, USER={db['USER']!r}, PASSWORD={db['PASSWORD']!r})\n"
            )

    def app_file(self, block: Block) -> None:
        assert block.file is not None
        (self.project / block.file).write_text(block.body)

    def shell_snippet(self, block: Block) -> None:
        assert self.in_shell, f"{block}: a snippet before the page opens a shell"
        printed = self.run([PYTHON, "manage.py", "shell"], stdin=block.body).splitlines()
        expected = re.findall(r"^print\(.*\)\s+# (.+)$", block.body, flags=re.MULTILINE)
        # What the shell itself says (the models it imported, say) comes first.
        last = [line.strip() for line in printed[len(printed) - len(expected) :]] if expected else []
        assert last == expected, f"{block}: printed {printed}, the page says {expected}"

    # ---- the commands that are more than a command --------------------------------------------

    def run_jobs_until_settled(self) -> None:
        help_text = self.run([PYTHON, "manage.py", "runjobs", "--help"])
        if "--until-settled" in help_text:
            self.run([PYTHON, "manage.py", "runjobs", "--until-settled"])
            assert self.active_jobs() == 0
            return
        # A worker without --until-settled: burst runs until the retries, due later, have run.
        deadline = time.monotonic() + 60
        while True:
            self.run([PYTHON, "manage.py", "runjobs", "--burst"])
            if self.active_jobs() == 0:
                return
            assert time.monotonic() < deadline, "the quickstart's jobs did not settle in 60 s"
            time.sleep(0.5)

    def active_jobs(self) -> int:
        count = (
            "from django_jobs.models import Job; "
            "print(Job.objects.filter(status__in=['pending', 'running']).count())"
        )
        return int(self.run([PYTHON, "manage.py", "shell", "-c", count]).split()[-1])

    def look_at_the_console(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen(
            [PYTHON, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=self.project, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            browser = Browser(f"http://127.0.0.1:{port}")
            browser.wait_until_up()
            browser.log_in("admin", PASSWORD)
            jobs = browser.get("/admin/django_jobs/job/")
            assert jobs.count("shop.charge_order") >= 2 and "Completed" in jobs
            first = min(int(i) for i in re.findall(r"/admin/django_jobs/job/(\d+)/change/", jobs))
            page = browser.get(f"/admin/django_jobs/job/{first}/change/")
            assert "NETWORK_TIMEOUT" in page and "Retry scheduled" in page and "simulate_lost_answer" in page
            assert "Queues" in browser.get("/admin/django_jobs/job/dashboard/")
        finally:
            server.terminate()
            server.wait(timeout=10)


class Browser:
    """Just enough of a browser for the admin: cookies, the login form's CSRF token."""

    def __init__(self, base: str) -> None:
        self.base = base
        cookies = urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        self.opener = urllib.request.build_opener(cookies)

    def get(self, path: str) -> str:
        with self.opener.open(self.base + path, timeout=10) as response:
            return str(response.read().decode())

    def wait_until_up(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                self.get("/admin/login/")
                return
            except OSError:
                assert time.monotonic() < deadline, "runserver did not answer in 30 s"
                time.sleep(0.2)

    def log_in(self, username: str, password: str) -> None:
        form = self.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
        assert token is not None
        data = urllib.parse.urlencode(
            {"csrfmiddlewaretoken": token[1], "username": username, "password": password, "next": "/admin/"}
        ).encode()
        with self.opener.open(self.base + "/admin/login/", data=data, timeout=10) as response:
            assert "Log out" in response.read().decode() or response.url.endswith("/admin/")


def test_the_quickstart_runs_as_written(tmp_path: Path, database: dict[str, str]) -> None:
    reader = Reader(tmp_path, database)
    steps = blocks(QUICKSTART)
    for block in steps:
        if block.lang in ("sh", "bash", "console"):
            for line in block.code.splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    reader.command(line.strip(), block)
        elif block.lang == "python" and block.file is not None and block.file.endswith("settings.py"):
            reader.settings_file(block)
        elif block.lang == "python" and block.file is not None:
            reader.app_file(block)
        elif block.lang == "python":
            reader.shell_snippet(block)
        else:
            raise AssertionError(f"{block}: the test does not know how to follow a {block.lang!r} block")
    assert len(steps) >= 10
