"""Issue 30, item 5: a store URL whose password was typed with an unencoded '@' (so a URL parser takes its tail for
the host) never shows any part of that password: refused in one line before connecting, and masked wherever the URL
is shown."""

from __future__ import annotations

import pytest

from agent.errors import UserError
from agent.hostside import redact
from agent.store import db

pytestmark = pytest.mark.unit  # nothing connects: the URL is refused before

URL = "postgresql+psycopg://spark:hunter2@tail-of-it@127.0.0.1:1/store"


@pytest.fixture(autouse=True)
def _no_remembered_values():
    redact.forget_all()
    yield
    redact.forget_all()


@pytest.mark.attack("store: a connection error shows the part of a password after an unencoded '@'")
def test_a_password_with_an_unencoded_at_is_never_shown():
    url = db.resolve_url(URL)
    with pytest.raises(UserError) as err:
        db.open_store(url)
    message = str(err.value)
    assert "percent-encode" in message and "\n" not in message
    for part in ("hunter2", "tail-of-it", "hunter2@tail"):
        assert part not in message and part not in db.shown(URL)
    assert "127.0.0.1:1/store" in db.shown(URL)
    assert "hunter2@tail-of-it" not in redact.redact_text("psql said: password hunter2@tail-of-it refused")


def test_an_encoded_password_is_masked_as_before():
    encoded = "postgresql+psycopg://spark:hunter2%40tail@127.0.0.1:1/store"
    db.resolve_url(encoded)
    assert db.shown(encoded) == "postgresql+psycopg://spark:***@127.0.0.1:1/store"
    assert "hunter2@tail" not in redact.redact_text("auth failed for hunter2@tail")
