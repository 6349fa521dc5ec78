"""Bearer tokens with roles (submit, worker, admin) from the settings. With no tokens configured every request may do
everything: the embedded default, serving 127.0.0.1.

A presented token is looked up by its sha256, never compared as text: no comparison that stops at the first differing
character tells a prober how much of a guess was right, and the settings may hold only the digests (config.py)."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Optional
from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from tunesvc.config import token_digest

bearer = HTTPBearer(auto_error=False, description="a token from TUNESVC_TOKENS")


@dataclass(frozen=True)
class Caller:
  """Who sent a request: their role, and what their jobs are recorded under (api/kernels.py) -- a digest of their token,
  or with no tokens configured their address. An admin's `submitter` is still its own: `admin` says it may do more."""
  submitter: str
  admin: bool


def check(request: Request, cred: Optional[HTTPAuthorizationCredentials], roles: tuple[str, ...]) -> Caller:
  roles_by_digest = request.app.state.settings.roles_by_digest
  if not roles_by_digest: return Caller(f"address {(request.client.host if request.client else '?')}", admin=True)
  if cred is None: raise HTTPException(401, "missing token: send 'Authorization: Bearer TOKEN'", {"WWW-Authenticate": "Bearer"})
  if (role := roles_by_digest.get(digest := token_digest(cred.credentials))) is None:
    raise HTTPException(401, "unknown token", {"WWW-Authenticate": "Bearer"})
  if role != "admin" and role not in roles: raise HTTPException(403, f"a {role} token may not do this: it needs {' or '.join(roles)}")
  return Caller(f"token {digest[:16]}", admin=role == "admin")

# the dependencies are async: a dict lookup is far cheaper than the threadpool hop FastAPI gives a sync one
def role(*roles: str):
  """A dependency that lets through a token of one of `roles`, or admin: the Caller."""
  async def dep(request: Request, cred: Optional[HTTPAuthorizationCredentials] = Depends(bearer)) -> Caller: return check(request, cred, roles)
  return Depends(dep)

async def lookup_role(request: Request, cred: Optional[HTTPAuthorizationCredentials] = Depends(bearer)) -> None:
  """Lookups are open unless the settings close them; then any token will do."""
  if not request.app.state.settings.open_lookups: check(request, cred, ("submit", "worker"))

ANY = role("submit", "worker")
SUBMITTER = role("submit")
WORKER = role("worker")
