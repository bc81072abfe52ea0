"""The `ragsync` commands, one module per command or command group; `ragsync.cli` assembles them."""
