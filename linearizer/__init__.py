"""The kernel format, its validation and semantics, and the linearizer (no tunesvc imports)."""

# The version of the code a schedule becomes (lowering and rendering): bump it with every change to the code they
# generate. Device fingerprints carry it, so timings measured on older code miss instead of being reused.
CODEGEN_VERSION = 26

# The version of the search's action space (search/actions.py's list of opts and what each means): bump it when the
# list or an opt's meaning changes, so results searched over another space are never reused as if they were this one's.
# Here, beside CODEGEN_VERSION, because the runtime library asks the service for opts by it without importing search/.
ACTION_SPACE_VERSION = 3
