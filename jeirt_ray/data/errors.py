"""The one error type for bad input data: it always says where the problem is."""

from __future__ import annotations


class DataError(ValueError):
    """Bad input data, located by file, row (1-based, header excluded), column and value."""

    def __init__(self, problem: str, *, file: str | None = None, row: int | None = None,
                 column: str | None = None, value: object = None, line: int | None = None,
                 record: int | None = None):
        """`row`: of a table with a header; `line`: of a JSON-lines file; `record`: the n-th
        record of a file without lines (Parquet)."""
        self.problem, self.file, self.row, self.column, self.value = problem, file, row, column, value
        where = []
        if file is not None:
            where.append(str(file))
        if row is not None:
            where.append(f"row {row} (line {row + 1})")
        if line is not None:
            where.append(f"line {line}")
        if record is not None:
            where.append(f"record {record}")
        if column is not None:
            where.append(f"column {column!r}")
        if value is not None:
            where.append(f"value {value!r}")
        super().__init__(f"{', '.join(where)}: {problem}" if where else problem)
