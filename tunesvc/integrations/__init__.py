"""Adapters that let real programs use tunesvc (ARCHITECTURE.md): each imports its framework, which is an optional extra,
and nothing else in tunesvc imports a framework."""
