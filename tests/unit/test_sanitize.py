from __future__ import annotations

import pytest

from django_jobs.sanitize import REDACTED, sanitize, truncate

SECRETS = [
    ("Authorization: Bearer eyJhbGciOi.eyJzdWIiOiIx.SflKxwRJSMeKKF2QT4", "SflKxwRJSMeKKF2QT4"),
    ("authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    ("Cookie: sessionid=s3ss10n; csrftoken=c5rf", "s3ss10n"),
    ("Set-Cookie: sessionid=s3ss10n; HttpOnly", "s3ss10n"),
    ("X-Api-Key: k3y-12345", "k3y-12345"),
    ("headers={'Authorization': 'Token abcdef123456', 'Accept': '*/*'}", "abcdef123456"),
    ('{"headers": {"Authorization": "Bearer zzzzzzzzzzzz"}}', "zzzzzzzzzzzz"),
    ("could not connect to postgres://app:hunter2@db.internal:5432/app", "hunter2"),
    ('{"password": "hunter2", "user": "bob"}', "hunter2"),
    ("{'api_key': 'abcdef', 'page': 2}", "abcdef"),
    ('{"client_secret": 123456789}', "123456789"),
    ("GET https://api.example.com/v1/items?access_token=tok123&page=2", "tok123"),
    ("login(user='bob', password='s3cr3t with spaces')", "s3cr3t with spaces"),
    ("DB_PASSWORD=hunter2 DEBUG=1", "hunter2"),
    ("secret: xyz987", "xyz987"),
    ("aws key AKIAIOSFODNN7EXAMPLE leaked", "AKIAIOSFODNN7EXAMPLE"),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc"),
    ("gh token ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "dozjgNryP4J3",
    ),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "MIIEow"),
    # In prose, as people and libraries write it.
    ("login failed for bob with password 'hunter2'", "hunter2"),
    ('the password is "correct horse battery staple"', "correct horse battery staple"),
    ("the password is hunter2, try again", "hunter2"),
    ("rejected: Password was Tr0ub4dor&3", "Tr0ub4dor&3"),
    ("request sent using token abc123def456", "abc123def456"),
    ("API key 9f8e7d6c5b4a is revoked", "9f8e7d6c5b4a"),
    ("the secret `s3cr3t-v4lue` leaked", "s3cr3t-v4lue"),
    ("invalid credentials 'bob:pa55'", "bob:pa55"),
]


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_secrets_are_redacted(text: str, secret: str) -> None:
    cleaned = sanitize(text)
    assert secret not in cleaned
    assert REDACTED in cleaned


@pytest.mark.parametrize(
    "text",
    [
        "provider answered 503 on /operations/crm-42",
        "ZeroDivisionError: division by zero",
        "user_id=42 status=failed attempts=3/5",
        'File "/app/jobs.py", line 12, in handler',
        # Words next to a secret's name that are not secrets.
        "password reset failed for user 42",
        "invalid token",
        "token expired at 12:00",
        "the password is incorrect.",
        "the password must have 8 characters",
        "3 passwords changed; secret santa list sent",
        "API key missing from the request",
        "could not refresh the access token (provider answered 503)",
    ],
)
def test_ordinary_diagnostics_are_kept(text: str) -> None:
    assert sanitize(text) == text


def test_the_rest_of_a_message_survives_redaction() -> None:
    cleaned = sanitize("POST /charge failed with 502; Authorization: Bearer abcdefghijk\nretry later")
    assert cleaned.startswith("POST /charge failed with 502;")
    assert cleaned.endswith("retry later")


def test_truncate_keeps_the_head_and_the_tail() -> None:
    text = "MESSAGE " + "x" * 10_000 + " INNERMOST FRAME"
    short = truncate(text, 500)
    assert len(short) <= 500
    assert short.startswith("MESSAGE")
    assert short.endswith("INNERMOST FRAME")
    assert truncate("short", 500) == "short"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # A traceback's source line and message, with the secret quoted, single-quoted, bare.
        (
            '    client.login(user="bob", password="hunter2", code="X")',
            '    client.login(user="bob", password="[REDACTED]", code="X")',
        ),
        ("ValueError: login(password='x', code='Y')", "ValueError: login(password='[REDACTED]', code='Y')"),
        ('    fetch(url, token=abc, code="X")', '    fetch(url, token=[REDACTED], code="X")'),
        # The secret inside a quoted string: the string's closing quote stays where it was.
        (
            '    psycopg.connect("host=db password=hunter2", code="X")',
            '    psycopg.connect("host=db password=[REDACTED]", code="X")',
        ),
        (
            "OperationalError('user=app password=hunter2', code='E1')",
            "OperationalError('user=app password=[REDACTED]', code='E1')",
        ),
        ('{"dsn": "user=a token=abc", "code": "X"}', '{"dsn": "user=a token=[REDACTED]", "code": "X"}'),
    ],
)
def test_redaction_keeps_the_quotes_around_the_secret(line: str, expected: str) -> None:
    assert sanitize(line) == expected


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        # A quote that opens no string is part of the secret, wherever it is in it.
        ('login(password=ab"cd, code=1)', 'ab"cd'),
        ('login(password=hunter2", code=1)', 'hunter2"'),
        ("connect('password=pa\"ss', code='X')", 'pa"ss'),
        ('  File "app.py", line 3\n    connect(password=s3cret", code=1)', 's3cret"'),
    ],
)
def test_a_quote_inside_a_secret_is_redacted_with_it(text: str, secret: str) -> None:
    cleaned = sanitize(text)
    assert secret not in cleaned
    assert secret.strip("\"'") not in cleaned
    assert cleaned.count(REDACTED) == 1
