"""The service's settings, from the environment (`Settings.from_env`) or built directly (tests, `tunesvc serve`)."""
from __future__ import annotations
import functools, hashlib, os, re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional
from tunesvc.store.proof import Proof
from tunesvc.store.queue import Backoff

ROLES = ("submit", "worker", "admin")  # admin may do everything
DIGEST = re.compile(r"sha256:([0-9a-f]{64})")  # a token given by its digest: the settings need not hold the token itself
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")  # as Host headers spell them


def token_digest(token: str) -> str: return hashlib.sha256(token.encode()).hexdigest()

def parse_tokens(text: str) -> dict[str, str]:
  """'tok1:submit,tok2:worker' or one `token:role` a line (a tokens file; # starts a comment) -> {token: role}. A token
  written `sha256:HEX` is known by its digest alone (`tunesvc` never needs the token itself: it hashes what it is sent)."""
  out = {}
  for item in text.replace("\n", ",").split(","):
    if not (item := item.split("#", 1)[0].strip()): continue
    token, sep, role = item.rpartition(":")
    if not sep or not token or role not in ROLES: raise ValueError(f"bad token entry {item[:8]}...: expected TOKEN:ROLE, ROLE one of {ROLES}")
    out[token] = role
  return out


@dataclass(frozen=True)
class Settings:
  database_url: Optional[str] = None   # None: SQLite under the user's data dir
  tokens: Mapping[str, str] = field(default_factory=dict)  # token -> role; none configured: every request may do everything
  open_lookups: bool = True            # GET /v1/opts and POST /v1/opts/lookup need no token
  max_body_bytes: int = 8 << 20
  max_head_bytes: int = 64 << 10       # a request's line and headers (431 past them)
  receive_s: float = 60.0              # a request, head and body, arrives whole within this of its first byte (slow loris)
  max_attempts: int = 3                # failed attempts (lapsed leases, reported failures) before a job fails
  sweep_s: float = 5.0                 # how often lapsed leases are swept when no claim does it first
  answer_ttl_s: float = 1.0            # an API process keeps a lookup's answer this long (0: never); see api/opts.py
  # what a report must prove (tunesvc/store/proof.py): plausibility limits and the confirmation's tolerance and independence
  max_flops_per_s: float = 1e16
  max_bytes_per_s: float = 2e13
  confirm_tolerance: float = 0.5
  confirm_baseline_factor: float = 4.0
  confirm_on_other_worker: bool = False  # a fleet with several workers per fingerprint, each machine its own worker token, sets it
  open_rate_per_s: float = 1000.0      # tokenless lookups per second per client address (bursts of twice that); 0: no limit
  lookup_nodes: int = 16384            # kernel nodes one lookup request may hold in all (each document costs its validation)
  max_kernel_bytes: int = 16 << 30     # buffer bytes a submitted kernel may need (422 past it): what no worker could allocate
  worker_offline_s: float = 180.0      # a worker silent this long (claims every few seconds, beats every lease/4) is offline
  # a job whose worker found the device too busy to time waits busy_backoff_s (doubling, at most 16x) before its next claim,
  # busy_retries times at most (tunesvc/store/queue.py)
  busy_retries: int = 6
  busy_backoff_s: float = 30.0
  max_pending_jobs: int = 10000        # queued or running jobs one caller (token; address without tokens) may have; admins: any
  max_live_workers: int = 1000         # workers one caller may have registered that are not offline (worker_offline_s); admins: any
  # without tokens, the Host names a request may carry (api/__init__.py: DNS rebinding); "*": any. With tokens: any
  allowed_hosts: tuple[str, ...] = LOOPBACK_NAMES

  @functools.cached_property
  def roles_by_digest(self) -> dict[str, str]:
    """sha256 of each token -> its role: what a presented token is looked up by (api/auth.py)."""
    return {m[1] if (m := DIGEST.fullmatch(t)) else token_digest(t): role for t, role in self.tokens.items()}

  def proof(self) -> Proof:
    return Proof(max_flops_per_s=self.max_flops_per_s, max_bytes_per_s=self.max_bytes_per_s, confirm_tolerance=self.confirm_tolerance,
                 confirm_baseline_factor=self.confirm_baseline_factor, confirm_on_other_worker=self.confirm_on_other_worker)

  def backoff(self) -> Backoff: return Backoff(self.busy_retries, self.busy_backoff_s, 16 * self.busy_backoff_s)

  @staticmethod
  def from_env(env: Mapping[str, str] = os.environ) -> Settings:
    """TUNESVC_DATABASE_URL, TUNESVC_TOKENS ('tok:role,...'), TUNESVC_TOKENS_FILE, TUNESVC_OPEN_LOOKUPS (0/1),
    TUNESVC_MAX_BODY_BYTES, TUNESVC_MAX_HEAD_BYTES, TUNESVC_RECEIVE_S, TUNESVC_MAX_ATTEMPTS, TUNESVC_ANSWER_TTL_S,
    TUNESVC_CONFIRM_TOLERANCE, TUNESVC_CONFIRM_BASELINE_FACTOR,
    TUNESVC_CONFIRM_ON_OTHER_WORKER (0/1), TUNESVC_WORKER_OFFLINE_S, TUNESVC_OPEN_RATE_PER_S, TUNESVC_LOOKUP_NODES,
    TUNESVC_MAX_KERNEL_BYTES, TUNESVC_BUSY_RETRIES, TUNESVC_BUSY_BACKOFF_S, TUNESVC_MAX_PENDING_JOBS, TUNESVC_ALLOWED_HOSTS
    ('a.lan,b.lan': more names than the loopback ones a tokenless service answers)."""
    tokens = parse_tokens(env.get("TUNESVC_TOKENS", ""))
    if path := env.get("TUNESVC_TOKENS_FILE"): tokens |= parse_tokens(Path(path).read_text())
    return Settings(database_url=env.get("TUNESVC_DATABASE_URL") or None, tokens=tokens,
                    open_lookups=env.get("TUNESVC_OPEN_LOOKUPS", "1") != "0",
                    max_body_bytes=int(env.get("TUNESVC_MAX_BODY_BYTES", 8 << 20)), max_head_bytes=int(env.get("TUNESVC_MAX_HEAD_BYTES", 64 << 10)),
                    receive_s=float(env.get("TUNESVC_RECEIVE_S", 60.0)), max_attempts=int(env.get("TUNESVC_MAX_ATTEMPTS", 3)),
                    answer_ttl_s=float(env.get("TUNESVC_ANSWER_TTL_S", 1.0)),
                    confirm_tolerance=float(env.get("TUNESVC_CONFIRM_TOLERANCE", 0.5)),
                    confirm_baseline_factor=float(env.get("TUNESVC_CONFIRM_BASELINE_FACTOR", 4.0)),
                    confirm_on_other_worker=env.get("TUNESVC_CONFIRM_ON_OTHER_WORKER", "0") == "1",
                    worker_offline_s=float(env.get("TUNESVC_WORKER_OFFLINE_S", 180.0)),
                    open_rate_per_s=float(env.get("TUNESVC_OPEN_RATE_PER_S", 1000.0)), lookup_nodes=int(env.get("TUNESVC_LOOKUP_NODES", 16384)),
                    max_kernel_bytes=int(env.get("TUNESVC_MAX_KERNEL_BYTES", 16 << 30)),
                    busy_retries=int(env.get("TUNESVC_BUSY_RETRIES", 6)), busy_backoff_s=float(env.get("TUNESVC_BUSY_BACKOFF_S", 30.0)),
                    max_pending_jobs=int(env.get("TUNESVC_MAX_PENDING_JOBS", 10000)),
                    max_live_workers=int(env.get("TUNESVC_MAX_LIVE_WORKERS", 1000)),
                    allowed_hosts=tuple(h.strip() for h in env["TUNESVC_ALLOWED_HOSTS"].split(",") if h.strip())
                    if env.get("TUNESVC_ALLOWED_HOSTS") else LOOPBACK_NAMES)
