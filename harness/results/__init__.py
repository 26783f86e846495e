"""What a run leaves on disk (I/O): the ledger (JSON lines, merged into a history), the
results tables' schema and their Parquet files, and the recorder that writes ``results/<run_id>/``."""
