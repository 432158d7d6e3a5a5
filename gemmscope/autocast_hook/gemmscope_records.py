"""What every part of gemmscope's start-up hook (sitecustomize.py beside this file) shares: how a
record is written (an NVTX range or mark and, while torch.profiler records, a record_function range),
the per-thread state, the process's own marks (rank, software versions), which TE class a class
is, and notes on stderr. Imports only the standard library and gemmscope_protocol."""

import os
import sys
import threading

from gemmscope_protocol import PROCESS_PREFIX, SOFTWARE_PREFIX, UNKNOWN, format_record

_TE_PACKAGE = "transformer_engine"

# Per thread: `node`, the backward nodes running (gemmscope_torch_gemms._watch_backward); `pending`, per
# autograd.Function.apply running, [the record of a GEMM awaiting the Function's node
# (await_backward_node), the TE module record that node is to keep]; `profiled`, per record range
# open, its torch.profiler handle (push).
thread = threading.local()


def note(message: str) -> None:
    print(f"gemmscope hook: {message}", file=sys.stderr, flush=True)


def te_base_class(cls: type) -> str | None:
    """The name of the first class in `cls`'s MRO that TE defines (None when none is): what a
    framework's subclass of a TE module or recipe is."""
    return te_class(cls)[0]


# Per Python class: (its TE base class or None, whether a GEMM's record may name it straight from
# the running modules). te_base_class walks an MRO; GEMM calls and module calls are a hot path.
_TE_CLASSES: dict = {}
# te.ops: the fuser runs its operations without calling them as modules, so the running modules
# show only what holds them; which operation made a GEMM is read from the calling TE frames.
_TE_OPS_PACKAGE = _TE_PACKAGE + ".pytorch.ops"


def te_class(cls: type) -> tuple[str | None, bool]:
    known = _TE_CLASSES.get(cls)
    if known is None:
        base = next((b for b in cls.__mro__ if b.__module__.startswith(_TE_PACKAGE)), None)
        known = _TE_CLASSES[cls] = ((base.__name__, not base.__module__.startswith(_TE_OPS_PACKAGE))
                                    if base is not None else (None, False))
    return known


# --- writing records --------------------------------------------------------------------------

# Every record goes into the trace as an NVTX range or mark (what nsys collects) and, while
# torch.profiler records, as a record_function range too: a Kineto trace holds no NVTX.
_profiler_enabled = None  # torch.autograd's "is a profiler recording", once torch is imported


def bind(torch) -> None:
    """Looks up, once torch is imported, what writing a record asks of it at every call."""
    global _profiler_enabled
    _profiler_enabled = torch._C._autograd._profiler_enabled


# Whether GEMM calls are recorded now: always, but under `verify --steps A-B` only while its capture
# is open (gemmscope_steps.record_only_between). Outside it nothing reads a record, and each one costs
# the program's thread tens of microseconds of Python per GEMM call. Autocast regions and step marks
# are recorded throughout: they are few, and a region's range must pop what it pushed.
recording = [True]


def profiler_recording() -> bool:
    return _profiler_enabled()


def on_main_thread_record(call) -> None:
    """`call()` before every record the hook makes on the main thread (a GEMM call's, an optimizer
    step's mark): where a torch.profiler time window opens and closes (gemmscope_torch_profiler),
    on the thread that runs the program, which a profiler started elsewhere would not record."""
    _at_record.append(call)


_at_record: list = []


def _record_made() -> None:
    if _at_record and threading.current_thread() is threading.main_thread():
        for call in _at_record:
            call()


def push(torch, label: str) -> None:
    _record_made()
    torch.cuda.nvtx.range_push(label)
    handles = thread.__dict__.get("profiled")
    if handles is None:
        handles = thread.profiled = []
    handles.append(torch.ops.profiler._record_function_enter_new(label, None) if _profiler_enabled() else None)


def pop(torch) -> None:
    handles = thread.__dict__.get("profiled")
    handle = handles.pop() if handles else None
    if handle is not None:
        torch.ops.profiler._record_function_exit._RecordFunction(handle)
    torch.cuda.nvtx.range_pop()


def mark(torch, label: str) -> None:
    _record_made()
    torch.cuda.nvtx.mark(label)
    if _profiler_enabled():
        torch.ops.profiler._record_function_exit._RecordFunction(
            torch.ops.profiler._record_function_enter_new(label, None))


def launcher_rank() -> str:
    """The process's rank as its launcher (torchrun, mpirun, SLURM) set it, or UNKNOWN."""
    env = os.environ
    return env.get("RANK", env.get("OMPI_COMM_WORLD_RANK", env.get("SLURM_PROCID", UNKNOWN)))


def mark_process(torch) -> None:
    env = os.environ
    rank = launcher_rank()
    local_rank = env.get("LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", env.get("SLURM_LOCALID", UNKNOWN)))
    world_size = env.get("WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE", env.get("SLURM_NTASKS", UNKNOWN)))
    mark(torch, format_record(PROCESS_PREFIX, {
        "rank": rank, "local_rank": local_rank, "world_size": world_size, "pid": os.getpid()}))


def _mark_software(torch) -> None:
    """The versions of what runs the GEMMs, once per process, at its first TE GEMM call (TE is
    wholly imported by then)."""
    te = sys.modules.get("transformer_engine")
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda or UNKNOWN,
                "transformer_engine": getattr(te, "__version__", UNKNOWN), "cublaslt": UNKNOWN}
    try:
        import transformer_engine_torch

        # cublasLtGetVersion: major·10000 + minor·100 + patch
        number = int(transformer_engine_torch.get_cublasLt_version())
        versions["cublaslt"] = f"{number // 10000}.{number // 100 % 100}.{number % 100}"
    except Exception:  # an older TE without it: the version stays unknown
        pass
    mark(torch, format_record(SOFTWARE_PREFIX, versions))


_software_marked: list = []  # non-empty once this process has recorded its software versions


def argument(args: tuple, kwargs: dict, name: str, position: int, default=None):
    """An argument of a call by name or position (signature.bind costs more than the GEMM call's
    whole record)."""
    if name in kwargs:
        return kwargs[name]
    return args[position] if position < len(args) else default


def mark_software_once(torch) -> None:
    if not _software_marked:
        _software_marked.append(True)
        try:
            _mark_software(torch)
        except Exception as exc:  # never break the program being checked
            note(f"software versions not recorded: {type(exc).__name__}")
