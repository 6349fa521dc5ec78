"""What the store keeps for the search's cost model: the searches a model may learn from (every candidate each measured,
in the results' JSON), and the models trained from them (`tunesvc cost-model train`), one per device family, codegen and
action-space version, which workers fetch (GET /v1/cost-models/{family})."""
from __future__ import annotations
import time
from typing import Any, Iterator, Optional
from sqlalchemy import select
from tunesvc.states import JobKind, ResultStatus
from tunesvc.store import Store
from tunesvc.store.models import CostModel, Fingerprint, Job, Kernel, Result

# a refuted result's timings disagreed with a second measurement, an invalidated one an admin stopped serving (a forged
# report, a broken worker): neither teaches a model
UNTRUSTED = (ResultStatus.REFUTED, ResultStatus.INVALIDATED)


def searches(st: Store, page: int = 200) -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]]:
  """(kernel document, fingerprint, the options its workers registered, the result's JSON with every candidate measured) of
  each tuning search a cost model may learn from, oldest first, `page` results read at a time: of fingerprints with options."""
  last = 0
  while True:
    q = select(Result.id, Kernel.document, Fingerprint.json, Fingerprint.options, Result.result).join(Job, Job.id == Result.job_id) \
      .join(Kernel, Kernel.key == Result.kernel_key).join(Fingerprint, Fingerprint.hash == Result.fingerprint_hash) \
      .where(Result.id > last, Job.kind == JobKind.TUNE, Result.status.not_in(UNTRUSTED), Fingerprint.options.is_not(None)) \
      .order_by(Result.id).limit(page)
    with st.read() as s: rows = s.execute(q).all()
    if not rows: return
    last = rows[-1][0]
    for _, doc, fp, options, result in rows: yield doc, fp, options, result


def put(st: Store, prior: dict[str, Any]) -> None:
  """Keep a trained prior (search/prior.py Prior.to_json()), replacing the one of its family and versions."""
  key = {k: prior[k] for k in ("family", "codegen_version", "action_space_version")}
  row = {**key, "prior": prior, "rows": len(prior["rows"]), "kernels": len(prior["kernels"]), "created": time.time()}
  new = {k: v for k, v in row.items() if k not in key}
  with st.write() as s: s.execute(st.insert(CostModel).values(row).on_conflict_do_update(index_elements=list(key), set_=new))


def get(st: Store, family: str, codegen_version: Optional[int] = None, action_space_version: Optional[int] = None) -> Optional[CostModel]:
  """The trained model of the family at these versions (None: the newest of each)."""
  q = select(CostModel).where(CostModel.family == family)
  if codegen_version is not None: q = q.where(CostModel.codegen_version == codegen_version)
  if action_space_version is not None: q = q.where(CostModel.action_space_version == action_space_version)
  with st.read() as s: return s.scalars(q.order_by(CostModel.codegen_version.desc(), CostModel.action_space_version.desc()).limit(1)).first()
