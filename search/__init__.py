"""Search: the versioned action space, beam search, compile pool and sandboxed runner (issue: Search)."""
