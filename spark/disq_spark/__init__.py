"""disq as a Spark data source, and `write_jobs` (see README.md).

`register(spark)` makes `format("disq")` available in a SparkSession (importing the
package does not): batch and streaming writes, streaming reads. `write_jobs` is a thin
wrapper over the data source that returns the write's counts. `PartitionWriter` (one
partition, no Spark) and `JobTaker` (a streaming read's jobs) do not need pyspark."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .reader import JobTaker, ReadOptions
from .writer import PartitionWriter, WriteError, WriteOptions, WriteStats, encode_body

if TYPE_CHECKING:
    from .source import BadRowsError, DisqDataSource, register
    from .spark import write_jobs

_SPARK = {"write_jobs": "spark", "register": "source", "DisqDataSource": "source",
          "BadRowsError": "source"}


def __getattr__(name: str) -> Any:
    module = _SPARK.get(name)
    if module is None:
        raise AttributeError(name)
    from importlib import import_module  # imported on use: the package loads without pyspark

    return getattr(import_module(f".{module}", __name__), name)


__all__ = ["BadRowsError", "DisqDataSource", "JobTaker", "PartitionWriter", "ReadOptions",
           "WriteError", "WriteOptions", "WriteStats", "encode_body", "register",
           "write_jobs"]
