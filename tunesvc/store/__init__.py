"""The store: kernels, jobs, measurements, results and workers, in SQLite under the user's data dir by default or in
PostgreSQL (a `postgresql+psycopg://` URL). `queue` changes jobs, `reads` answers questions."""
from __future__ import annotations
import contextlib, time
from pathlib import Path
from typing import Iterator
import platformdirs
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker
from tunesvc.store.migrate import upgrade

# busy_timeout: how long a writer waits for the write lock while no other writer commits (writes take milliseconds: a holder
# that keeps it this long is stuck, and the API answers 503); MAX_WRITE_WAIT_S: how long while others commit (begin_write)
BUSY_TIMEOUT_MS = 5000
MAX_WRITE_WAIT_S = 60.0
SQLITE_PRAGMAS = ("journal_mode=WAL", "foreign_keys=ON", "synchronous=NORMAL")


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
    for p in (f"busy_timeout={BUSY_TIMEOUT_MS}", *SQLITE_PRAGMAS): dbapi_conn.execute(f"PRAGMA {p}")  # the wait first: WAL may wait too
  @event.listens_for(engine, "begin")
  def begin(conn):
    # a writer takes the write lock up front: two deferred transactions that both go on to write would deadlock
    # (SQLite then fails one at once, busy_timeout or not); IMMEDIATE makes them queue instead
    if conn.get_execution_options().get("write"): begin_write(conn)
    else: conn.exec_driver_sql("BEGIN")
  return engine


def begin_write(conn: Connection) -> None:
  """BEGIN IMMEDIATE, waiting for the write lock as long as other writers go on committing. SQLite's busy handler sleeps
  and retries (every 100 ms after the first few): among many writers one can miss every moment the lock was free for a
  whole busy_timeout though no writer held it long (8 processes on a loaded machine: "database is locked"). So a writer
  gives up only where nothing was committed during a whole busy_timeout (a holder that is stuck), or after MAX_WRITE_WAIT_S."""
  end = time.monotonic() + MAX_WRITE_WAIT_S
  while True:
    seen = conn.exec_driver_sql("PRAGMA data_version").scalar()  # changes when another connection commits a change
    try:
      conn.exec_driver_sql("BEGIN IMMEDIATE")
      return
    except OperationalError as e:
      stuck = conn.exec_driver_sql("PRAGMA data_version").scalar() == seen
      if "locked" not in str(e.orig) or stuck or time.monotonic() > end: raise


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
