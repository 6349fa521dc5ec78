"""The search's cost models trained from the store (`tunesvc cost-model train`): a worker fetches its device family's to
rank a model-strategy search from round 1 (search/prior.py)."""
from __future__ import annotations
from typing import Annotated, Optional
from fastapi import APIRouter, HTTPException, Path, Query, Request
from tunesvc.api.auth import ANY
from tunesvc.api.models import CostModelOut, Version
from tunesvc.store import cost_models

router = APIRouter(prefix="/v1/cost-models", tags=["cost models"], dependencies=[ANY])


@router.get("/{family}", response_model=CostModelOut, responses={404: {"description": "none trained for this family and versions"}})
def cost_model(family: Annotated[str, Path(pattern=r"^[a-z0-9_]{1,32}-w[0-9]{1,3}$")], request: Request,
               codegen_version: Annotated[Optional[Version], Query()] = None, action_space_version: Annotated[Optional[Version], Query()] = None):
  """The family's trained cost model at these versions (omitted: the newest trained)."""
  if (m := cost_models.get(request.app.state.store, family, codegen_version, action_space_version)) is None:
    raise HTTPException(404, f"no cost model trained for {family} at codegen version {'any' if codegen_version is None else codegen_version}, "
                             f"action-space version {'any' if action_space_version is None else action_space_version}")
  p = m.prior
  return CostModelOut(family=m.family, codegen_version=m.codegen_version, action_space_version=m.action_space_version, names=p["names"],
                      kernels=p["kernels"], rows=p["rows"], meta=p.get("meta", {}), created=m.created)
