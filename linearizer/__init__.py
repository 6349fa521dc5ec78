"""The kernel format, its validation and semantics, and the linearizer (no tunesvc imports)."""
