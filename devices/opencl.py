"""The OpenCL backend over gpuctypes.opencl: device discovery, program build, buffers, launches timed by profiling
events, fingerprint, LinearizerOptions from the device's limits. Device 0 is the first device of the first platform
that has one.

compile() builds the source for the device in the calling process's own context (compile workers each make one)
and returns the program binary; Program loads it with clCreateProgramWithBinary. So a build error, with its log, is a
compile error found in parallel in the pool, and the runner that owns the device only loads and launches. The source's
first line (render_c.launch_line) says how to launch it: the Binary carries it beside the program binary.

Buffers: alloc() gives device memory (Buffer), which copyin/copyout fill and read; a Program takes Buffers, or host
numpy arrays, which it copies in before and back out after the launch (all of them: a kernel that writes an input
must show it)."""
from __future__ import annotations
import ctypes, functools
from typing import Optional, Sequence
import numpy as np
import numpy.typing as npt
from devices.base import Binary, CompileError, DeviceError, Staged, clipped, contiguous, int_arg, launch_of
from devices.base import fingerprint_hash as fingerprint_hash  # the device interface's
from linearizer import CODEGEN_VERSION
from linearizer.options import LinearizerOptions
from linearizer.render_c import OPENCL, launch_sizes, render_opencl as render  # noqa: F401  (the device interface's renderer)

# / and sqrt correctly rounded, as the reference computes them (the default allows 2.5 and 3 ulp)
DEFAULT_FLAGS: tuple[str, ...] = ("-cl-fp32-correctly-rounded-divide-sqrt",)
HOST_MEMORY = False  # buffers live on the device (alloc)


class OpenCLError(DeviceError): pass


@functools.cache
def _cl():
  """gpuctypes.opencl, checked: without libOpenCL it binds no function and raises nothing."""
  try: from gpuctypes import opencl as cl
  except (ImportError, OSError) as e: raise OpenCLError(f"gpuctypes.opencl does not load: {e}") from None
  if not hasattr(cl, "clGetPlatformIDs"):
    raise OpenCLError("no OpenCL library: install an ICD loader and a driver (Debian: ocl-icd-libopencl1 pocl-opencl-icd)")
  return cl

def _check(status: int, what: str) -> None:
  if status != 0: raise OpenCLError(f"{what} failed: OpenCL error {status}")

def _checked(fn, *args):
  """Call a cl* function that reports through its last argument, a status pointer."""
  status = ctypes.c_int32()
  out = fn(*args, ctypes.byref(status))
  _check(status.value, fn.__name__)
  return out

def _info(get, obj, param: int, ctype=None):
  """One clGet*Info value: a string, or a ctype (an array type for arrays)."""
  size = ctypes.c_uint64()
  _check(get(obj, param, 0, None, ctypes.byref(size)), f"clGet*Info({param:#x})")
  buf = (ctypes.c_char * size.value)() if ctype is None else ctype()
  _check(get(obj, param, ctypes.sizeof(buf), buf, None), f"clGet*Info({param:#x})")
  return buf.value.decode(errors="replace").strip() if ctype is None else buf


@functools.cache
def _device():
  """(platform, device) 0: the first device of the first platform that has one."""
  cl = _cl()
  n = ctypes.c_uint32()
  if cl.clGetPlatformIDs(0, None, ctypes.byref(n)) != 0 or n.value == 0: raise OpenCLError("no OpenCL platform (no ICD installed)")
  platforms = (cl.cl_platform_id * n.value)()
  _check(cl.clGetPlatformIDs(n.value, platforms, None), "clGetPlatformIDs")
  for p in platforms:
    if cl.clGetDeviceIDs(p, cl.CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(n)) == 0 and n.value:
      devs = (cl.cl_device_id * n.value)()
      _check(cl.clGetDeviceIDs(p, cl.CL_DEVICE_TYPE_ALL, n.value, devs, None), "clGetDeviceIDs")
      return p, devs[0]
  raise OpenCLError("no OpenCL device on any platform")

@functools.cache
def _context():
  """(context, profiling queue) of this process on device 0."""
  cl, (_, dev) = _cl(), _device()
  ctx = _checked(cl.clCreateContext, None, 1, ctypes.byref(dev), cl.clCreateContext.argtypes[3](), None)
  return ctx, _checked(cl.clCreateCommandQueue, ctx, dev, cl.CL_QUEUE_PROFILING_ENABLE)

def device_id() -> int:
  """Device 0's cl_device_id as an address: another OpenCL user in this process drives the same device where its id is this."""
  return ctypes.cast(_device()[1], ctypes.c_void_p).value or 0

def available() -> bool:
  try: _device()
  except OpenCLError: return False
  return True


def compile(src: str, flags: tuple[str, ...] = DEFAULT_FLAGS) -> Binary:
  """Source -> the device's program binary and the source's launch; the build log in the CompileError."""
  cl, (_, dev), (ctx, _) = _cl(), _device(), _context()
  text = ctypes.create_string_buffer(src.encode())
  prog = _checked(cl.clCreateProgramWithSource, ctx, 1, (ctypes.POINTER(ctypes.c_char) * 1)(ctypes.cast(text, ctypes.POINTER(ctypes.c_char))), None)
  try:
    if (status := cl.clBuildProgram(prog, 1, ctypes.byref(dev), " ".join(flags).encode(), cl.clBuildProgram.argtypes[4](), None)) != 0:
      log = _info(functools.partial(cl.clGetProgramBuildInfo, prog), dev, cl.CL_PROGRAM_BUILD_LOG)
      raise CompileError(f"OpenCL build failed ({status}):\n{clipped(log)}")
    size = _info(cl.clGetProgramInfo, prog, cl.CL_PROGRAM_BINARY_SIZES, ctypes.c_uint64 * 1)[0]
    binary = (ctypes.c_ubyte * size)()
    ptrs = (ctypes.POINTER(ctypes.c_ubyte) * 1)(ctypes.cast(binary, ctypes.POINTER(ctypes.c_ubyte)))
    _check(cl.clGetProgramInfo(prog, cl.CL_PROGRAM_BINARIES, ctypes.sizeof(ptrs), ptrs, None), "clGetProgramInfo")
  finally: cl.clReleaseProgram(prog)
  return Binary(bytes(binary), launch_of(src))


class Buffer:
  """Device memory for n elements of a dtype."""
  def __init__(self, n: int, dtype: npt.DTypeLike):
    self.n, self.dtype = n, np.dtype(dtype)
    self.mem = _checked(_cl().clCreateBuffer, _context()[0], _cl().CL_MEM_READ_WRITE, max(1, n * self.dtype.itemsize), None)
  def __del__(self):
    if getattr(self, "mem", None): _cl().clReleaseMemObject(self.mem)

def alloc(n: int, dtype: npt.DTypeLike) -> Buffer: return Buffer(n, dtype)

def copyin(buf: Buffer, host: np.ndarray) -> None:
  x = contiguous(buf, host)
  if x.size: _check(_cl().clEnqueueWriteBuffer(_context()[1], buf.mem, True, 0, x.nbytes, x.ctypes.data, 0, None, None), "clEnqueueWriteBuffer")

def copyout(buf: Buffer) -> np.ndarray:
  x = np.empty(buf.n, buf.dtype)
  if x.size: _check(_cl().clEnqueueReadBuffer(_context()[1], buf.mem, True, 0, x.nbytes, x.ctypes.data, 0, None, None), "clEnqueueReadBuffer")
  return x


class Program(Staged):
  """A built kernel `name` and its launch."""
  def __init__(self, binary: Binary, name: str):
    if binary.launch is None: raise DeviceError("OpenCL needs a GPU kernel's Binary, with its launch")
    cl, (_, dev), (ctx, self.queue) = _cl(), _device(), _context()
    self.launch_dims, self.alloc, self.copyin, self.copyout = binary.launch, alloc, copyin, copyout
    data = (ctypes.c_ubyte * len(binary.image)).from_buffer_copy(binary.image)
    ptrs = (ctypes.POINTER(ctypes.c_ubyte) * 1)(ctypes.cast(data, ctypes.POINTER(ctypes.c_ubyte)))
    status = ctypes.c_int32()
    size = (ctypes.c_uint64 * 1)(len(binary.image))
    self.prog = _checked(cl.clCreateProgramWithBinary, ctx, 1, ctypes.byref(dev), size, ptrs, ctypes.byref(status))
    _check(status.value, "loading the program binary")
    _check(cl.clBuildProgram(self.prog, 1, ctypes.byref(dev), None, cl.clBuildProgram.argtypes[4](), None), "clBuildProgram (binary)")
    self.name, self.kernel = name, _checked(cl.clCreateKernel, self.prog, OPENCL.symbol.format(name).encode())

  def __del__(self):
    if getattr(self, "kernel", None): _cl().clReleaseKernel(self.kernel)
    if getattr(self, "prog", None): _cl().clReleaseProgram(self.prog)

  def launch(self, bufs: Sequence[Buffer], var_vals: Sequence[int], timed: bool) -> Optional[float]:
    cl = _cl()
    groups, local = launch_sizes(self.launch_dims, var_vals)
    for i, b in enumerate(bufs): _check(cl.clSetKernelArg(self.kernel, i, ctypes.sizeof(b.mem), ctypes.byref(b.mem)), "clSetKernelArg")
    for i, v in enumerate(var_vals, len(bufs)): _check(cl.clSetKernelArg(self.kernel, i, 4, ctypes.byref(int_arg(v))), "clSetKernelArg")
    dims = max(1, len(groups), len(local))
    local = (local + [1] * 3)[:dims]
    gsize, lsize = (ctypes.c_uint64 * dims)(*(g * l for g, l in zip(groups + [1] * 3, local))), (ctypes.c_uint64 * dims)(*local)
    event = cl.cl_event()
    _check(cl.clEnqueueNDRangeKernel(self.queue, self.kernel, dims, None, gsize, lsize, 0, None, ctypes.byref(event)), "clEnqueueNDRangeKernel")
    try:
      _check(cl.clWaitForEvents(1, ctypes.byref(event)), "running the kernel")
      if not timed: return None
      start, end = (_info(cl.clGetEventProfilingInfo, event, p, ctypes.c_uint64 * 1)[0]
                    for p in (cl.CL_PROFILING_COMMAND_START, cl.CL_PROFILING_COMMAND_END))
      return (end - start) * 1e-9
    finally: cl.clReleaseEvent(event)


def fingerprint(flags: tuple[str, ...] = DEFAULT_FLAGS) -> dict:
  cl, (p, d) = _cl(), _device()
  return {"backend": "OPENCL", "platform": _info(cl.clGetPlatformInfo, p, cl.CL_PLATFORM_NAME),
          "platform_version": _info(cl.clGetPlatformInfo, p, cl.CL_PLATFORM_VERSION), "device": _info(cl.clGetDeviceInfo, d, cl.CL_DEVICE_NAME),
          "device_version": _info(cl.clGetDeviceInfo, d, cl.CL_DEVICE_VERSION), "driver_version": _info(cl.clGetDeviceInfo, d, cl.CL_DRIVER_VERSION),
          "opencl_c_version": _info(cl.clGetDeviceInfo, d, cl.CL_DEVICE_OPENCL_C_VERSION), "flags": list(flags),
          "codegen": CODEGEN_VERSION,
          "options": options().to_json()}

def options() -> LinearizerOptions:
  cl, (_, d) = _cl(), _device()
  wg = _info(cl.clGetDeviceInfo, d, cl.CL_DEVICE_MAX_WORK_GROUP_SIZE, ctypes.c_uint64 * 1)[0]
  items = tuple(_info(cl.clGetDeviceInfo, d, cl.CL_DEVICE_MAX_WORK_ITEM_SIZES, ctypes.c_uint64 * 3))
  shared = _info(cl.clGetDeviceInfo, d, cl.CL_DEVICE_LOCAL_MEM_SIZE, ctypes.c_uint64 * 1)[0]
  # float16 lives in float registers (no cl_khr_fp16 assumed): its lanes are not vectorised
  return LinearizerOptions("OPENCL", has_local=True, has_shared=True, supports_float4=True, float_vector_widths=(4,),
                           vector_dtypes=("float32", "float64"), local_max=items, local_size_max=wg, shared_max=shared)
