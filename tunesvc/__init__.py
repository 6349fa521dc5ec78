"""tunesvc: the service, store, client library and CLI."""
