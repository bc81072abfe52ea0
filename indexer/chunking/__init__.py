"""Format readers and the passage sizing they share; `indexer.chunker` is the entry point."""
