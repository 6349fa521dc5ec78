"""The kernel format, its validation and semantics, and the linearizer (no tunesvc imports)."""

# The version of the code a schedule becomes (lowering and rendering): bump it with every change to the code they
# generate. Device fingerprints carry it, so timings measured on older code miss instead of being reused.
CODEGEN_VERSION = 1
