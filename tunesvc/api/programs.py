"""Models (programs whose kernels were captured and submitted together, e.g. by `tunesvc tune model.jsonl`): each with
its kernels, their runs per inference, and how far their tuning is (the dashboard's models page)."""
from __future__ import annotations
import collections
from typing import Annotated
from fastapi import APIRouter, HTTPException, Path, Request
from tunesvc.api.auth import ANY
from tunesvc.states import JobState
from tunesvc.api.models import ModelKernelOut, ModelOut, ModelPage
from tunesvc.store import reads

router = APIRouter(prefix="/v1", tags=["models"], dependencies=[ANY])
ORDER = (JobState.DONE, JobState.RUNNING, JobState.QUEUED, JobState.FAILED)  # a kernel's state is its best job's


def _model(name: str, rows, detail: bool) -> ModelOut:
  ks = [ModelKernelOut(key=k.key, name=k.name, runs=runs, state=next((s for s in ORDER if s in states), "none")) for k, runs, states in rows]
  return ModelOut(model=name, kernels=len(ks), runs=sum(k.runs for k in ks), states=dict(collections.Counter(k.state for k in ks)),
                  detail=ks if detail else None)

@router.get("/models", response_model=ModelPage)
def models(request: Request):
  """Every model with its tuning progress: kernels per state."""
  return ModelPage(models=[_model(m, rows, False) for m, rows in reads.model_kernels(request.app.state.store).items()])

@router.get("/models/{name}", response_model=ModelOut)
def model(name: Annotated[str, Path(min_length=1, max_length=128)], request: Request):
  """One model with each kernel: its runs per inference and its state, most-run first."""
  if not (rows := reads.model_kernels(request.app.state.store, name).get(name)): raise HTTPException(404, f"model {name!r} not found")
  return _model(name, rows, True)
