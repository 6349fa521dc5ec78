"""Write the example kernels to examples/kernels/NAME.json. Run from anywhere: python examples/make_kernels.py

tests/test_builders.py checks that the files equal what this would write now.
"""
from __future__ import annotations
import json, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable without installing the package
from linearizer import builders as B
from linearizer.ast import KernelAST

OUT = Path(__file__).resolve().parent / "kernels"

EXAMPLES = {
  "matmul_512": lambda name: B.matmul(512, 512, 512, name=name),
  "matmul_1024": lambda name: B.matmul(1024, 1024, 1024, name=name),
  "conv2d_3x3_pad": lambda name: B.conv2d(1, 64, 56, 56, 64, 3, 3, padding=1, name=name),
  "maxpool_2x2": lambda name: B.pool2d("max", 1, 64, 112, 112, k=2, name=name),
  "sum_rows_4096": lambda name: B.reduce("SUM", (4096, 4096), (1,), name=name),
  "sum_all": lambda name: B.reduce("SUM", (4096, 4096), (0, 1), name=name),
  "softmax_max": lambda name: B.softmax_max(4096, 1024, name=name),
  "softmax_exp_sum": lambda name: B.softmax_exp_sum(4096, 1024, name=name),
  "softmax_div": lambda name: B.softmax_div(4096, 1024, name=name),
  "elementwise_chain": lambda name: B.elementwise_chain((1024, 1024), 32, name=name),
  "mul_add_16m": lambda name: B.mul_add(1 << 24, name=name),
  "symbolic_sum": lambda name: B.symbolic_sum(32, ("start_pos", 1, 4096), name=name),
}

def build() -> dict[str, KernelAST]: return {name: make(name) for name, make in EXAMPLES.items()}

def _node(n: dict, ind: str) -> str:
  head = f'{{"op": {json.dumps(n["op"])}' + (f', "arg": {json.dumps(n["arg"])}' if "arg" in n else "")
  if "src" not in n: return head + "}"
  return head + ', "src": [\n' + ",\n".join(ind + " " + _node(s, ind + " ") for s in n["src"]) + "]}"

def dumps(k: KernelAST) -> str:
  """Pretty JSON in the layout of the format doc: one node per line, its arg inline."""
  doc = k.to_json()
  lines = [f" {json.dumps(key)}: {json.dumps(v)}" for key, v in doc.items() if key != "ast"]
  return "{\n" + ",\n".join(lines + [' "ast": ' + _node(doc["ast"], " ")]) + "\n}\n"

def main() -> None:
  OUT.mkdir(exist_ok=True)
  for name, k in build().items():
    (OUT / f"{name}.json").write_text(dumps(k))
    print(f"{name}: full shape {tuple(map(str, k.full_shape))}, {len(k.buffers)} buffers, key {k.key[:12]}")

if __name__ == "__main__": main()
