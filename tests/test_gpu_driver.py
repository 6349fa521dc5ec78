"""devices/gpu.py's table of names, checked with no GPU: every CUDA and HIP name is bound by gpuctypes (read from its
source: gpuctypes.hip does not import without ROCm), and each function pair takes the same arguments; the whole driver
path (device, context, memory, module, launch, events) run against a fake library that checks every call's arguments
against those bindings' argument counts and records the launch."""
import ast, ctypes, importlib.util, math, re, types
from pathlib import Path
import numpy as np
import pytest
from devices import cuda, gpu, hip
from devices.base import Binary, DeviceError, launch_of
from linearizer.builders import matmul
from linearizer.kernel import Kernel, Opt
from linearizer.lower import lower
from linearizer.render_c import launch_sizes

GPUCTYPES = Path(importlib.util.find_spec("gpuctypes").submodule_search_locations[0])
SOURCES = {"CUDA": (GPUCTYPES / "cuda.py").read_text(), "HIP": (GPUCTYPES / "hip.py").read_text()}
COLUMN = {"CUDA": 0, "HIP": 1}
ATTRIBUTES = ("MAX_THREADS_PER_BLOCK", "MAX_BLOCK_DIM_X", "MAX_BLOCK_DIM_Y", "MAX_BLOCK_DIM_Z", "MAX_GRID_DIM_X", "MAX_GRID_DIM_Y",
              "MAX_GRID_DIM_Z", "MAX_SHARED_MEMORY_PER_BLOCK", "COMPUTE_CAPABILITY_MAJOR", "COMPUTE_CAPABILITY_MINOR")


def argcount(api: str, fn: str) -> int:
  """How many arguments gpuctypes binds `fn` with."""
  if alias := re.search(rf"^{re.escape(fn)} = (\w+)$", SOURCES[api], re.M): return argcount(api, alias.group(1))
  m = re.search(rf"^\s*{re.escape(fn)}\.argtypes = (\[.*\])$", SOURCES[api], re.M)
  assert m, f"gpuctypes binds no {fn} for {api}"
  return len(ast.parse(m.group(1), mode="eval").body.elts)

def defined(api: str, name: str) -> bool: return re.search(rf"^\s*{re.escape(name)} = ", SOURCES[api], re.M) is not None


@pytest.mark.parametrize("api", ["CUDA", "HIP"])
def test_every_name_in_the_table_is_bound_by_gpuctypes(api):
  names = [n[COLUMN[api]] for n in gpu.NAMES.values() if n[COLUMN[api]]]
  assert [n for n in names if not defined(api, n)] == []
  attrs = [gpu.ATTRIBUTE[COLUMN[api]].format(a if api == "CUDA" else a.title().replace("_", "")) for a in ATTRIBUTES]
  assert [a for a in attrs if not defined(api, a)] == []

def test_cuda_and_hip_functions_of_one_name_take_the_same_arguments():
  pairs = [(c, h) for c, h in gpu.NAMES.values() if c and h and not c[0].isupper() and not h[0].isupper()]
  assert len(pairs) >= 18 and {(c, h): (argcount("CUDA", c), argcount("HIP", h)) for c, h in pairs if argcount("CUDA", c) != argcount("HIP", h)} == {}


class FakeLibrary(types.SimpleNamespace):
  """A driver library on host memory, built from gpuctypes' bindings of one API: every function checks how many
  arguments it is called with; memory is numpy arrays at their addresses; a launch records its dims and arguments."""
  def __init__(self, api: str):
    super().__init__()
    self.api, self.memory, self.launches = api, {}, []
    col = COLUMN[api]
    for ours, pair in gpu.NAMES.items():
      if (name := pair[col]) is None: continue
      if name[0].isupper() or name.endswith("_t"): setattr(self, name, ctypes.c_void_p); continue  # a handle type
      setattr(self, name, self._function(ours, name, argcount(api, name)))
    for a in ATTRIBUTES: setattr(self, gpu.ATTRIBUTE[col].format(a if api == "CUDA" else a.title().replace("_", "")), len(a))
    self.char_pointer_cast = lambda s: ctypes.c_char_p(s.encode())

  def _function(self, ours: str, name: str, nargs: int):
    def call(*args):
      assert len(args) == nargs, f"{name} takes {nargs} arguments, called with {len(args)}"
      return getattr(self, "_" + ours, lambda *a: 0)(*args)
    call.__name__ = name
    return call

  @staticmethod
  def _out(ref, value) -> int:
    """Write through a byref() argument, as the driver does."""
    ref._obj.value = value
    return 0
  def _count(self, n): return self._out(n, 1)
  def _device(self, d, ordinal): return self._out(d, ordinal)
  def _attribute(self, v, attr, dev): return self._out(v, attr)  # an attribute's value is its name's length
  def _error_string(self, status, msg): return 0
  def _malloc(self, ptr, size):
    mem = np.zeros(size, np.uint8)
    self.memory[mem.ctypes.data] = mem
    return self._out(ptr, mem.ctypes.data)
  def _free(self, ptr): return 0 if self.memory.pop(ptr.value, None) is not None else 1
  def _htod(self, dst, src, n): return ctypes.memmove(dst.value, src, n) and 0
  def _dtoh(self, dst, src, n): return ctypes.memmove(dst, src.value, n) and 0
  def _module_load(self, module, image): return 0 if image.raw.startswith(b"IMAGE") else 200
  def _launch(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
    self.launches.append(((gx, gy, gz), (bx, by, bz), params))
    return 0
  def _event_elapsed(self, ms, start, end): return self._out(ms, 1.5)


@pytest.mark.parametrize("api", ["CUDA", "HIP"])
def test_the_driver_path_runs_on_a_fake_library(api):
  lib = FakeLibrary(api)
  drv = gpu.Driver(gpu.CUDA_API if api == "CUDA" else gpu.HIP_API)
  drv.__dict__["lib"] = lib  # the cached library, loaded
  assert drv.available() and drv.limits() == (21, (15, 15, 15), (14, 14, 14), 27)
  buf = drv.alloc(4, np.float32)
  drv.copyin(buf, np.arange(4, dtype=np.float32))
  assert drv.copyout(buf).tolist() == [0, 1, 2, 3]
  with pytest.raises(ValueError, match="into a buffer of 4"): drv.copyin(buf, np.zeros(3, np.float32))
  src = (cuda.render if api == "CUDA" else hip.render)(lower(Kernel(matmul(8, 8, 8), cuda.ARCH_OPTIONS["sm_80"]).apply_opts([Opt("LOCAL", 0, 4)])))
  prog = drv.program(Binary(b"IMAGE", launch_of(src)), "kernel")
  host = [np.zeros(64, np.float32), np.ones(64, np.float32), np.ones(64, np.float32)]
  assert prog(*host) is None and len(lib.memory) == 1  # the host arrays staged through 3 buffers, freed after
  assert prog.time(buf, buf, buf) == pytest.approx(1.5e-3)
  groups, local = launch_sizes(launch_of(src), [])
  assert [launch[:2] for launch in lib.launches] == [((*groups, 1, 1)[:3], (*local, 1, 1)[:3])] * 2 and math.prod(groups) * math.prod(local) == 64
  assert [len(launch[2]) for launch in lib.launches] == [3, 3]
  with pytest.raises(DeviceError, match="module_load|ModuleLoad"): drv.program(Binary(b"not an image", {}), "kernel")
  with pytest.raises(DeviceError, match="with its launch"): drv.program(Binary(b"IMAGE"), "kernel")
