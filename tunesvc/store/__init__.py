"""The store: kernels, jobs, measurements, results and workers, in SQLite under the user's data dir by default or in
PostgreSQL (a `postgresql+psycopg://` URL). `queue` changes jobs, `reads` answers questions."""
from __future__ import annotations
import contextlib
from pathlib import Path
from typing import Iterator
import platformdirs
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker
from tunesvc.store.migrate import upgrade

# busy_timeout: how long a writer waits for another's write lock before the API answers 503 (writes take milliseconds)
SQLITE_PRAGMAS = ("journal_mode=WAL", "busy_timeout=5000", "foreign_keys=ON", "synchronous=NORMAL")


def default_url() -> str:
  path = Path(platformdirs.user_data_dir("tunesvc")) / "tunesvc.db"
  path.parent.mkdir(parents=True, exist_ok=True)
  return f"sqlite:///{path}"

def make_engine(url: str) -> Engine:
  # a server's connection can drop (a restart, a terminated backend): each checkout pings it first. A SQLite connection is
  # a file handle that stays good (a full disk or a held lock fails the statement, not the connection): no ping, which
  # would be one more statement per lookup
  if not url.startswith("sqlite"): return create_engine(url, pool_pre_ping=True)
  engine = create_engine(url)
  @event.listens_for(engine, "connect")
  def connect(dbapi_conn, _):
    dbapi_conn.isolation_level = None  # the driver's own BEGIN is deferred; we send ours
    for p in SQLITE_PRAGMAS: dbapi_conn.execute(f"PRAGMA {p}")
  @event.listens_for(engine, "begin")
  def begin(conn):
    # a writer takes the write lock up front: two deferred transactions that both go on to write would deadlock
    # (SQLite then fails one at once, busy_timeout or not); IMMEDIATE makes them queue instead
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("write") else "BEGIN")
  return engine


class Store:
  def __init__(self, url: str | None = None):
    self.url = url or default_url()
    self.engine = make_engine(self.url)
    upgrade(self.engine)
    self.postgres = self.engine.dialect.name == "postgresql"
    self._reader = sessionmaker(self.engine, expire_on_commit=False)
    self._writer = sessionmaker(self.engine.execution_options(write=True), expire_on_commit=False)

  @contextlib.contextmanager
  def read(self) -> Iterator[Session]:
    with self._reader() as s: yield s

  @contextlib.contextmanager
  def write(self) -> Iterator[Session]:
    """One transaction, committed on success; serialised against other writers on SQLite."""
    with self._writer.begin() as s: yield s

  def insert(self, table):
    """INSERT with ON CONFLICT (both dialects spell it the same)."""
    return (postgresql.insert if self.postgres else sqlite.insert)(table)

  def close(self) -> None: self.engine.dispose()
