"""Models (programs whose kernels were captured and submitted together, e.g. by `tunesvc tune model.jsonl`): each with
its kernels, their runs per inference, and how far their tuning is (the dashboard's models page). Paged: a model costs its
submitter nothing once its kernels' jobs exist, so there may be any number of them."""
from __future__ import annotations
from typing import Annotated
from fastapi import APIRouter, HTTPException, Path, Query, Request
from tunesvc.api.auth import ANY
from tunesvc.api.models import MAX_INT, ModelKernelOut, ModelOut, ModelPage
from tunesvc.store import reads

router = APIRouter(prefix="/v1", tags=["models"], dependencies=[ANY])
Limit = Annotated[int, Query(ge=1, le=500)]
Offset = Annotated[int, Query(ge=0, le=MAX_INT)]


def _model(m: reads.ModelSummary, **extra) -> ModelOut:
  return ModelOut(model=m.model, kernels=m.kernels, runs=m.runs, states=m.states, **extra)

@router.get("/models", response_model=ModelPage)
def models(request: Request, limit: Limit = 50, offset: Offset = 0):
  """A page of models by name, each with its tuning progress: kernels per state."""
  ms, more = reads.models(request.app.state.store, limit, offset)
  return ModelPage(models=[_model(m) for m in ms], next_offset=offset + limit if more else None)

@router.get("/models/{name}", response_model=ModelOut)
def model(name: Annotated[str, Path(min_length=1, max_length=128)], request: Request, limit: Limit = 50, offset: Offset = 0):
  """One model, and a page of its kernels, most-run first: each one's runs per inference and state."""
  st = request.app.state.store
  if not (found := reads.models(st, 1, 0, name)[0]): raise HTTPException(404, f"model {name!r} not found")
  ks, more = reads.model_kernels(st, name, limit, offset)
  return _model(found[0], detail=[ModelKernelOut(key=key, name=kname, runs=runs, state=state) for key, kname, runs, state in ks],
                next_offset=offset + limit if more else None)
