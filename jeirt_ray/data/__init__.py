"""Response data: schema, importers, synthetic generator and splits."""

from .dataset import ResponseData
from .errors import DataError
from .loaders import fetch_embedllm, load_data, load_embedllm, load_long_format
from .splits import Split, read_split, split_by_model, split_by_question, split_leave_benchmark_out

__all__ = ["ResponseData", "DataError", "load_data", "load_long_format", "load_embedllm", "fetch_embedllm",
           "Split", "read_split", "split_by_question", "split_by_model", "split_leave_benchmark_out"]
