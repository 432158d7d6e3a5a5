"""Small hand-built Nsight Systems exports, for attribution rules no real capture pins down.

A CPU trace made with real nsys holds NVTX ranges but no CUDA kernel, and the GPU fixtures hold
no range that starts or ends exactly at a launch. `HandBuiltExport` writes an SQLite file whose
tables are created by the very statements of a real nsys 2025.3 export (copied from its
sqlite_master, with its META_DATA_EXPORT and TARGET_INFO_GPU rows), then holds only the threads,
launch calls, kernels and NVTX events a test adds: each row as nsys writes it (global ids
packing process and thread, StringIds for names, NVTX event types 34/59/60/75).
"""

from __future__ import annotations

import lzma
import sqlite3
from contextlib import closing
from pathlib import Path

from fixture_paths import CORPUS

# NVTX_EVENTS.eventType (nsys's ENUM_NSYS_EVENT_TYPE)
MARK, PUSH_POP, START_END, DOMAIN_CREATE = 34, 59, 60, 75
# A BF16 GEMM and a split-K reduction, as cuBLAS 13 names them on an H200 (tests/fixtures/gpu).
BF16_GEMM = "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT"
SPLIT_K_REDUCE = "void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, float, __nv_bfloat16, float, " \
                 "__nv_bfloat16, (bool)1, __nv_bfloat16, __nv_bfloat16, (bool)0, (bool)0, (bool)0>" \
                 "(cublasLt::KernelParams<T3, T4, T5, T6, T7, T8, T10>)"
LAUNCH_CALL = "cudaLaunchKernel_v7000"
SESSION_NS = 10**12


def export(name: str) -> sqlite3.Connection:
    """A corpus export (tests/fixtures/gpu/corpus/NAME.sqlite.xz) opened in memory, to read what
    nsys recorded straight from its tables."""
    db = sqlite3.connect(":memory:")
    db.deserialize(lzma.decompress((CORPUS / f"{name}.sqlite.xz").read_bytes()))
    return db


def global_tid(pid: int, tid: int) -> int:
    """nsys's serialized global id of a thread (a process: tid 0)."""
    return (pid << 24) | tid


class HandBuiltExport:
    """An export with nsys's schema and the rows a test adds; `close()` writes it."""

    def __init__(self, path: Path, schema_from: Path):
        self.path = Path(path)
        self.conn = sqlite3.connect(self.path)
        with closing(sqlite3.connect(f"file:{schema_from}?mode=ro", uri=True)) as real:
            statements = [sql for (sql,) in real.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL")]
            meta = real.execute("SELECT name, value FROM META_DATA_EXPORT").fetchall()
            gpus = real.execute("SELECT * FROM TARGET_INFO_GPU").fetchall()
        for sql in statements:
            self.conn.execute(sql)
        self.conn.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", meta)
        self.conn.executemany(f"INSERT INTO TARGET_INFO_GPU VALUES ({', '.join('?' * len(gpus[0]))})", gpus)
        self.conn.execute("INSERT INTO ANALYSIS_DETAILS (globalVid, duration, startTime, stopTime) VALUES (?, ?, 0, ?)",
                          (1 << 48, SESSION_NS, SESSION_NS))
        self._strings: dict[str, int] = {}
        self._correlation = 0

    def string(self, value: str) -> int:
        if value not in self._strings:
            self._strings[value] = len(self._strings) + 1
            self.conn.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (self._strings[value], value))
        return self._strings[value]

    def thread(self, pid: int, tid: int, name: str) -> None:
        self.conn.execute("INSERT INTO ThreadNames (nameId, priority, globalTid) VALUES (?, 20, ?)",
                          (self.string(name), global_tid(pid, tid)))

    def call(self, pid: int, tid: int, start: int, end: int, correlation: int | None = None) -> int:
        """A launch call on thread (pid, tid) over [start, end]; `correlation` repeats an earlier
        call's id (a call nested in another, as a runtime call around a driver call is), else a new
        one. Returns the call's correlation id."""
        if correlation is None:
            self._correlation += 1
            correlation = self._correlation
        self.conn.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, "
            "returnValue) VALUES (?, ?, 0, ?, ?, ?, 0)",
            (start, end, global_tid(pid, tid), correlation, self.string(LAUNCH_CALL)))
        return correlation

    def launch(self, pid: int, tid: int, start: int, end: int, kernel: str = BF16_GEMM,
               kernel_ns: int = 1000, call: bool = True) -> int:
        """A launch call on thread (pid, tid) over [start, end] and the kernel it launched, which
        runs for `kernel_ns` right after the call; `call` False: the kernel alone, as a capture
        that missed its call has it. Returns the correlation id."""
        if call:
            correlation = self.call(pid, tid, start, end)
        else:
            self._correlation += 1
            correlation = self._correlation
        name = self.string(kernel)
        self.conn.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId, "
            "globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "
            "staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId) "
            "VALUES (?, ?, 0, 1, 7, ?, ?, ?, ?, 128, 1, 1, 1, 256, 1, 1, 0, 0, 0, 0, ?)",
            (end + 10, end + 10 + kernel_ns, correlation, global_tid(pid, 0), name, name, correlation))
        return correlation

    def nvtx(self, kind: int, pid: int, tid: int, start: int, end: int | None, text: str | None,
             domain: int = 0) -> None:
        """One NVTX event (`kind`: MARK, PUSH_POP, START_END, DOMAIN_CREATE); `end` None: a range
        never closed, as an older export leaves it; `text` None: a range pushed without a message."""
        self.conn.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?, ?, ?, ?, ?, ?)",
            (start, end, kind, text, global_tid(pid, tid), domain))

    def close(self) -> Path:
        self.conn.commit()
        self.conn.close()
        return self.path
