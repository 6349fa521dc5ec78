"""Write the example kernels to examples/kernels/NAME.json. Run from anywhere: python examples/make_kernels.py

tests/test_builders.py checks that the files equal what this would write now.
"""
from __future__ import annotations
import json, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # runnable without installing the package
from linearizer.builders import examples as build
from linearizer.ast import KernelAST

OUT = Path(__file__).resolve().parent / "kernels"


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
