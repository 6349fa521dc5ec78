"""The runtime's hot path: the tuned opts of kernels on a device fingerprint."""
from __future__ import annotations
import asyncio
from typing import Annotated, Optional
from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from tunesvc.api.auth import lookup_role
from tunesvc.api.kernels import load_all
from tunesvc.api.models import HEX64, MAX_INT, LookupRequest, LookupResponse, OptsOut
from tunesvc.store import reads

router = APIRouter(prefix="/v1/opts", tags=["opts"], dependencies=[Depends(lookup_role)])


async def answers(request: Request, keys: list[str], fingerprint: str, version: Optional[int]) -> list[Optional[OptsOut]]:
  st = request.app.state.store
  # the endpoints are async and SQLite is read in the event loop: a local indexed read takes less than the hop to the
  # threadpool and back that a sync endpoint costs (and the GIL serialises the work anyway); PostgreSQL's round trip
  # over the network must not hold the loop, so it goes to a thread
  rows = await asyncio.to_thread(reads.lookup, st, keys, fingerprint, version) if st.postgres else reads.lookup(st, keys, fingerprint, version)
  hits = sum(k in rows for k in keys)
  request.app.state.metrics.lookups.labels("hit").inc(hits)
  request.app.state.metrics.lookups.labels("miss").inc(len(keys) - hits)
  return [None if (r := rows.get(k)) is None else
          OptsOut(kernel_key=k, fingerprint=fingerprint, action_space_version=r.action_space_version, opts=r.best_opts,
                  best_s=r.best_s, baseline_s=r.baseline_s) for k in keys]


@router.get("/{kernel_key}", response_model=OptsOut)
async def opts(kernel_key: Annotated[str, Path(pattern=HEX64)], fingerprint: Annotated[str, Query(pattern=HEX64)], request: Request,
               action_space_version: Annotated[Optional[int], Query(ge=0, le=MAX_INT, description="default: the newest tuned")] = None):
  """The fastest verified opts of this kernel on this fingerprint, or 404: then run the hand-coded ones."""
  if (a := (await answers(request, [kernel_key], fingerprint, action_space_version))[0]) is None:
    raise HTTPException(404, f"kernel {kernel_key} is not tuned for fingerprint {fingerprint}"
                        + ("" if action_space_version is None else f" at action-space version {action_space_version}"))
  return a


@router.post("/lookup", response_model=LookupResponse)
async def lookup(body: LookupRequest, request: Request):
  """A batch of keys and/or documents in one query; null where nothing is tuned."""
  keys = body.keys + [k.key for k in load_all(body.kernels, "kernels")]
  return LookupResponse(results=await answers(request, keys, body.fingerprint, body.action_space_version))
