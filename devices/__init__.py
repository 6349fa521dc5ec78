"""Devices: one module per backend with compiler, loader, allocator, timer and fingerprint (issues: CPU, GPU backends)."""
