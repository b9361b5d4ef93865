"""A job of this package handed to spark-submit, the package shipped with it (--py-files).

A job's driver imports the `jobs` package (jobs/report/...). spark-submit runs the job's
file with only that file's directory on sys.path, so the package goes along as a zip with
--py-files: Spark puts it on the driver's PYTHONPATH (and the executors'), in client and in
cluster deploy mode alike. `twinlog report` runs the snapshot report this way.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

JOBS = Path(__file__).resolve().parent
ZIP_NAME = "twinlog-jobs.zip"


def package_zip(directory: Path) -> Path:
    """The `jobs` package's Python files as a zip in `directory`, each under `jobs/` as
    --py-files wants it (nothing else of twinlog: the jobs import none of it)."""
    archive = directory / ZIP_NAME
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as writer:
        for source in sorted(JOBS.rglob("*.py")):
            writer.write(source, source.relative_to(JOBS.parent).as_posix())
    return archive


def spark_submit() -> Path:
    """The spark-submit pyspark itself launches: $SPARK_HOME's, else the one inside the
    pyspark package."""
    home = os.environ.get("SPARK_HOME")
    if not home:
        import pyspark

        home = str(Path(pyspark.__file__).resolve().parent)
    return Path(home) / "bin" / "spark-submit"


def submit(master: str, job: str, arguments: Sequence[str]) -> int:
    """Run `job` (a file of this package) with spark-submit against `master` in client
    mode, the package zipped in a temporary directory for --py-files; spark-submit's exit
    status. The driver runs on this Python, which has the job's pyspark and pyarrow."""
    with tempfile.TemporaryDirectory(prefix="twinlog-submit-") as directory:
        command = [str(spark_submit()), "--master", master,
                   "--py-files", str(package_zip(Path(directory))), str(JOBS / job), *arguments]
        environment = {**os.environ, "PYSPARK_DRIVER_PYTHON": sys.executable}
        return subprocess.run(command, env=environment, check=False).returncode
