"""The package boundaries (README.md's Layout; the design's ARCHITECTURE.md), checked on every import statement (function-level ones
too): what each package may import of ours outside itself. The API and the store take search.result, the result's
schema, and search.settings (dataclasses, no device), besides linearizer (whose alike.py gives the kernel's structure and
sizes by which the store finds kernels alike); the runtime library (runtime, client and its
cache) runs kernels, so it takes devices, and nothing of search (ACTION_SPACE_VERSION lives in linearizer); the CLI and
`serve` wire everything."""
import ast
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("linearizer", "devices", "search", "workers", "tunesvc")
RESULT_SCHEMA = ("linearizer", "search.result", "search.settings")  # plain dataclasses, no device
ALLOWED = [  # (module prefix, the modules of ours outside it that it may import), the first match applies
  ("linearizer", ()),
  ("devices", ("linearizer",)),
  ("search", ("linearizer", "devices")),
  ("workers", ("linearizer", "devices", "search", "tunesvc.client", "tunesvc.states")),
  ("tunesvc.api", RESULT_SCHEMA), ("tunesvc.store", RESULT_SCHEMA), ("tunesvc.config", RESULT_SCHEMA),
  ("tunesvc.states", ()),  # the service's closed sets of names: plain enums that workers share through the client's JSON
  ("tunesvc.client", ("linearizer",)), ("tunesvc.cache", ("linearizer",)),
  ("tunesvc.runtime", ("linearizer", "devices")),
  ("tunesvc.integrations", ("linearizer", "devices", "tunesvc.runtime", "tunesvc.client", "tunesvc.integrations")),
  ("tunesvc.cli", OURS), ("tunesvc.serve", OURS),
]
FRAMEWORKS = ("tinygrad",)  # optional extras: imported only by tunesvc.integrations


def all_imports(path: Path) -> set[str]:
  out: set[str] = set()
  for n in ast.walk(ast.parse(path.read_text())):
    if isinstance(n, ast.Import): out |= {a.name for a in n.names}
    elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module: out.add(n.module)
  return out

def imports(path: Path) -> set[str]: return {m for m in all_imports(path) if m.split(".")[0] in OURS}

def within(module: str, prefix: str) -> bool: return module == prefix or module.startswith(prefix + ".")

MODULES = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                 for top in OURS for p in (ROOT / top).rglob("*.py"))

@pytest.mark.parametrize("module", MODULES)
def test_imports_keep_the_package_boundaries(module):
  prefix, allowed = next(((p, a) for p, a in ALLOWED if within(module, p)), (module.split(".")[0], ()))
  base = ROOT / module.replace(".", "/")
  path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
  bad = [m for m in imports(path) if not within(m, module.split(".")[0]) and not any(within(m, a) for a in allowed)]
  assert not bad, f"{module} imports {bad}: outside what {prefix} may import ({', '.join(allowed) or 'nothing of ours'})"


def test_every_tunesvc_module_has_a_rule():
  assert [m for m in MODULES if m.startswith("tunesvc.") and not any(within(m, p) for p, _ in ALLOWED)] == []


@pytest.mark.parametrize("module", [m for m in MODULES if not within(m, "tunesvc.integrations")])
def test_frameworks_only_in_integrations(module):
  base = ROOT / module.replace(".", "/")
  path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
  assert not [m for m in all_imports(path) if m.split(".")[0] in FRAMEWORKS], f"{module} imports a framework: only tunesvc.integrations may"
