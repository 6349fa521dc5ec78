"""NVRTC and hipRTC, CUDA's and ROCm's runtime compilers: one C API under two prefixes, bound here with ctypes (gpuctypes
binds each only from a fixed library name, which misses the pip wheel's NVRTC and ROCm 6's separate libhiprtc)."""
from __future__ import annotations
import ctypes
from devices.base import CompileError, clipped


class RTC:
  """A runtime compiler's library: `prefix` nvrtc or hiprtc; `code` names its binary getter (GetCUBIN, GetCode)."""
  def __init__(self, lib: ctypes.CDLL, prefix: str, code: str):
    P, I, S, SS = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p)
    sigs = {"Version": [ctypes.POINTER(I), ctypes.POINTER(I)], "CreateProgram": [ctypes.POINTER(P), ctypes.c_char_p, ctypes.c_char_p, I, SS, SS],
            "CompileProgram": [P, I, SS], "GetProgramLogSize": [P, ctypes.POINTER(S)], "GetProgramLog": [P, ctypes.c_char_p],
            f"{code}Size": [P, ctypes.POINTER(S)], code: [P, ctypes.c_char_p], "DestroyProgram": [ctypes.POINTER(P)], "GetErrorString": [I]}
    self.prefix, self.fns = prefix, {}
    for name, args in sigs.items():
      f = self.fns[name.replace(code, "Code")] = getattr(lib, prefix + name)
      f.argtypes, f.restype = args, ctypes.c_char_p if name == "GetErrorString" else I

  def _check(self, status: int, what: str) -> None:
    if status != 0: raise CompileError(f"{self.prefix}{what} failed: {self.fns['GetErrorString'](status).decode()}")

  def version(self) -> str:
    major, minor = ctypes.c_int(), ctypes.c_int()
    self._check(self.fns["Version"](ctypes.byref(major), ctypes.byref(minor)), "Version")
    return f"{major.value}.{minor.value}"

  def compile(self, src: str, opts: list[str], what: str) -> tuple[bytes, str]:
    """(binary, log) of src under opts; the log in the CompileError, which names `what` was compiled for."""
    f, prog, size = self.fns, ctypes.c_void_p(), ctypes.c_size_t()
    self._check(f["CreateProgram"](ctypes.byref(prog), src.encode(), b"kernel.cu", 0, None, None), "CreateProgram")
    try:
      status = f["CompileProgram"](prog, len(opts), (ctypes.c_char_p * max(1, len(opts)))(*[o.encode() for o in opts]))
      self._check(f["GetProgramLogSize"](prog, ctypes.byref(size)), "GetProgramLogSize")
      log = ctypes.create_string_buffer(size.value)
      self._check(f["GetProgramLog"](prog, log), "GetProgramLog")
      text = log.value.decode(errors="replace")
      if status != 0:
        raise CompileError(f"{self.prefix} failed ({f['GetErrorString'](status).decode()}) for {what}:\n{clipped(text)}")
      self._check(f["CodeSize"](prog, ctypes.byref(size)), "CodeSize")
      code = ctypes.create_string_buffer(size.value)
      self._check(f["Code"](prog, code), "Code")
    finally: f["DestroyProgram"](ctypes.byref(prog))
    return code.raw, text
