"""Reading traces: what a profiler wrote, as the trace model's DataFrames (nothing attributed yet).

- model: the `Trace` every reader returns, and how nsys packs process and thread ids;
- nsys: Nsight Systems' SQLite exports (.sqlite, .sqlite.xz, .nsys-rep), all of gemmscope's SQL;
- kineto: PyTorch profiler (Kineto) Chrome traces (.json, .json.gz), streamed;
- read: which files were named, and which reader reads each, told by content.
"""
