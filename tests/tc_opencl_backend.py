"""A test-only backend: the OpenCL device with the SM80 tensor cores in its options, which its renderer emulates.
Passed to search.tune as `module`, it reaches the compile pool and the runner by name, as a real backend does."""
import dataclasses
from devices.opencl import HOST_MEMORY, Program, alloc, available, compile, copyin, copyout, fingerprint, fingerprint_hash, render  # noqa: F401
from devices.opencl import options as opencl_options
from linearizer.tensor_cores import SM80


def options(): return dataclasses.replace(opencl_options(), tensor_cores=SM80)
