"""Bearer tokens with roles (submit, worker, admin) from the settings. With no tokens configured every request may do
everything: the embedded default, serving 127.0.0.1.

A presented token is looked up by its sha256, never compared as text: no comparison that stops at the first differing
character tells a prober how much of a guess was right, and the settings may hold only the digests (config.py)."""
from __future__ import annotations
from typing import Optional
from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from tunesvc.config import token_digest

bearer = HTTPBearer(auto_error=False, description="a token from TUNESVC_TOKENS")


def check(request: Request, cred: Optional[HTTPAuthorizationCredentials], roles: tuple[str, ...]) -> None:
  roles_by_digest = request.app.state.settings.roles_by_digest
  if not roles_by_digest: return
  if cred is None: raise HTTPException(401, "missing token: send 'Authorization: Bearer TOKEN'", {"WWW-Authenticate": "Bearer"})
  if (role := roles_by_digest.get(token_digest(cred.credentials))) is None: raise HTTPException(401, "unknown token", {"WWW-Authenticate": "Bearer"})
  if role != "admin" and role not in roles: raise HTTPException(403, f"a {role} token may not do this: it needs {' or '.join(roles)}")

# the dependencies are async: a dict lookup is far cheaper than the threadpool hop FastAPI gives a sync one
def role(*roles: str):
  """A dependency that lets through a token of one of `roles`, or admin."""
  async def dep(request: Request, cred: Optional[HTTPAuthorizationCredentials] = Depends(bearer)): check(request, cred, roles)
  return Depends(dep)

async def lookup_role(request: Request, cred: Optional[HTTPAuthorizationCredentials] = Depends(bearer)) -> None:
  """Lookups are open unless the settings close them; then any token will do."""
  if not request.app.state.settings.open_lookups: check(request, cred, ("submit", "worker"))

ANY = role("submit", "worker")
