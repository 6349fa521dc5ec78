"""Workers: the long-running per-device tuning process (issue: The service)."""
