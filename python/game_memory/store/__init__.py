"""The authoritative, partitioned, crash-safe file store of memories and its lexical search."""
