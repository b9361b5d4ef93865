"""Read workers: processes that answer consume reads beside the one that appends
(docs/read-workers.md). `pool.py` is the broker's side, `worker.py` a worker's."""
