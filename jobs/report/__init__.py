"""The snapshot report's code, one concept a module; jobs/snapshot_report.py runs it.

- layout: snapshots found under roots (paths or URIs), gaps in a series, the store-time
  range and the files of its hours;
- tables: the messages read once each, the mergeable partial tables, the report's tables
  and their Parquet output;
- incremental: the state an output directory keeps between runs, and a run that reads only
  the snapshots it has not reported.

Nothing here imports the rest of twinlog: a Spark driver needs only this package (shipped
with spark-submit --py-files, docs/spark.md), pyspark and pyarrow.
"""
