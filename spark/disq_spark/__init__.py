"""Write Spark DataFrames and RDDs as disq jobs from the executors (see README.md).

`write_jobs` needs pyspark; `PartitionWriter` (one partition, no Spark) does not."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .writer import PartitionWriter, WriteError, WriteOptions, WriteStats, encode_body

if TYPE_CHECKING:
    from .spark import write_jobs


def __getattr__(name: str) -> Any:
    if name == "write_jobs":  # imported on use: the package loads without pyspark
        from .spark import write_jobs
        return write_jobs
    raise AttributeError(name)


__all__ = ["PartitionWriter", "WriteError", "WriteOptions", "WriteStats", "encode_body",
           "write_jobs"]
