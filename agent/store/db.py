"""Where the store is, opening it, and keeping its schema current (Alembic, the same code path for every database).

The URL comes from --store, else $SPARK_AGENT_STORE, else the [store] url of the config file ($SPARK_AGENT_CONFIG,
default ~/.config/spark-agent/config.toml), else SQLite in the results folder. The password of a URL is remembered
by agent.hostside.redact as soon as the URL is read, so no message, log line or report can show it.
"""

from __future__ import annotations

import os
import threading
import tomllib
import urllib.parse
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from agent.errors import UserError, missing_extra
from agent.hostside import redact

ENV_URL = "SPARK_AGENT_STORE"
ENV_CONFIG = "SPARK_AGENT_CONFIG"
DEFAULT_CONFIG = Path.home() / ".config" / "spark-agent" / "config.toml"
DEFAULT_NAME = "store.sqlite"  # in the results folder
OFF = "off"  # $SPARK_AGENT_STORE=off: sweeps do not ingest as cells land
MIGRATIONS = Path(__file__).resolve().parent / "migrations"

_engines: dict[str, sa.Engine] = {}
_lock = threading.Lock()  # one engine per URL per process; sweeps ingest from one thread per host


def resolve_url(option: str | None, results_root: Path | None = None) -> str:
    """The store URL (see the module doc); UserError for a config file that cannot be read."""
    url = option or os.environ.get(ENV_URL) or _config_url()
    if not url:
        root = Path(results_root or "results")
        url = f"sqlite:///{(root / DEFAULT_NAME).resolve()}"
    _remember_password(url)
    return url


def _config_url() -> str:
    path = Path(os.environ.get(ENV_CONFIG) or DEFAULT_CONFIG)
    if not path.is_file():
        return ""
    try:
        with open(path, "rb") as fh:
            table = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(
            f"{path}: cannot read the config file ({str(exc)[:120]}); fix it or unset {ENV_CONFIG}"
        ) from None
    url = table.get("store", {}).get("url", "") if isinstance(table.get("store"), dict) else ""
    if not isinstance(url, str):
        raise UserError(f'{path}: [store] url must be a string like "postgresql+psycopg://user@host/db"')
    return url


def _raw_password(url: str) -> str:
    """The password as typed: between the user's ':' and the LAST '@' (an unencoded '@' in it makes URL parsers
    take the rest for the host, which then shows in every message)."""
    userinfo = url.partition("://")[2].rpartition("@")[0]
    return userinfo.partition(":")[2]


def _remember_password(url: str) -> None:
    raw = _raw_password(url)
    try:
        password = sa.engine.make_url(url).password
    except sa.exc.ArgumentError:
        password = None
    redact.remember([v for v in (raw, password, urllib.parse.unquote(raw)) if v])


def shown(url: str) -> str:
    """The URL as it may be shown: password masked, also one typed with an unencoded '@'."""
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        return redact.redact_text(url)
    if "@" in (parsed.host or ""):  # the password's tail was taken for the host: keep what follows the last '@'
        return f"{parsed.drivername}://{parsed.username or ''}:***@{url.rpartition('@')[2]}"
    return parsed.render_as_string(hide_password=True)


def head() -> str:
    """The newest schema revision this version knows."""
    return ScriptDirectory.from_config(_alembic_config()).get_current_head() or ""


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def open_store(url: str, *, upgrade: bool = True) -> sa.Engine:
    """An engine on the store, its schema upgraded in place to head. UserError (one line) for a URL that is no
    database URL, a server that cannot be reached, refused credentials, or a schema newer than this version."""
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _connect(url)
            try:
                check_revision(engine, url, upgrade=upgrade)
            except sa.exc.DatabaseError as exc:  # SQLite's "file is not a database", a damaged version table
                engine.dispose()
                reason = " ".join(str(exc.orig or exc).split())[:120]
                raise UserError(
                    f"store {shown(url)}: not a spark-agent store ({reason}); pass another --store, or move the "
                    "file away to start a new store"
                ) from None
            _engines[url] = engine
        return engine


def close_all() -> None:
    with _lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()


def _connect(url: str) -> sa.Engine:
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        raise UserError(
            f"store URL {shown(url)!r} is not a database URL (use sqlite:///PATH or postgresql+psycopg://USER@HOST/DB)"
        ) from None
    if "@" in (parsed.host or ""):
        raise UserError(
            f"store URL {shown(url)!r}: its password holds an unencoded '@' (or another reserved character before "
            "one); percent-encode the password (@ is %40, : is %3A, / is %2F) and pass the URL again"
        )
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        folder = Path(parsed.database).parent
        if not folder.is_dir():
            raise UserError(f"store {shown(url)}: folder {folder} does not exist (create it or pass --store)")
    try:
        engine = sa.create_engine(parsed, **_options(parsed))
        with engine.connect():
            pass
    except sa.exc.NoSuchModuleError:
        raise UserError(f"store URL {shown(url)!r}: unknown database kind (use sqlite or postgresql+psycopg)") from None
    except ImportError as exc:  # the URL's driver is not installed (psycopg comes with the [postgres] extra)
        if parsed.get_backend_name() == "postgresql":
            raise missing_extra("postgres", f"store {shown(url)}") from None
        raise UserError(f"store {shown(url)}: its database driver is not installed ({exc.name})") from None
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        reason = " ".join(str(exc.orig or exc).split())[:200]
        raise UserError(
            f"store {shown(url)}: cannot connect ({reason}); check the URL, the server and the credentials"
        ) from None
    return engine


def _options(url: sa.engine.URL) -> dict[str, object]:
    if url.get_backend_name() == "sqlite":
        # several sweeps (threads) and a CLI may write at once: wait for the lock instead of failing
        return {"connect_args": {"timeout": 60}}
    return {"pool_pre_ping": True}


def current_revision(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def check_revision(engine: sa.Engine, url: str, *, upgrade: bool = True) -> None:
    """Refuse a store of a newer schema; upgrade an older (or empty) one in place."""
    script = ScriptDirectory.from_config(_alembic_config())
    current = current_revision(engine)
    known = {rev.revision for rev in script.walk_revisions()}
    if current is not None and current not in known:
        raise UserError(
            f"store {shown(url)} has schema revision {current}, newer than this spark-agent knows "
            f"(newest {script.get_current_head()}): upgrade spark-agent to use it"
        )
    if current != script.get_current_head() and upgrade:
        try:
            migrate(engine, "head")
        except sa.exc.DBAPIError:
            # another controller opened the same new store at the same moment and migrated it first
            if current_revision(engine) != script.get_current_head():
                raise


def migrate(engine: sa.Engine, revision: str) -> None:
    """Upgrade the store to `revision` (Alembic), in one transaction."""
    config = _alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
