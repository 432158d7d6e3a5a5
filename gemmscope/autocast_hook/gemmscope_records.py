"""What every part of gemmscope's start-up hook (sitecustomize.py beside this file) shares: how a
record is written (an NVTX range or mark and, while torch.profiler records, a record_function range),
how an entry point of torch or TE is patched (patch: never at the program's cost), the per-thread
state, the process's own marks (rank, software versions, what could not be patched), which TE class
a class is, and notes on stderr. Imports only the standard library and gemmscope_protocol."""

import inspect
import os
import sys
import threading

from gemmscope_protocol import (
    FIELD_SEPARATOR,
    PROCESS_PREFIX,
    SOFTWARE_PREFIX,
    TESTED_TORCH,
    UNKNOWN,
    UNPATCHED_PREFIX,
    format_record,
    parse_record,
)

_TE_PACKAGE = "transformer_engine"

# Per thread: `node`, the backward nodes running (gemmscope_torch_gemms._watch_backward); `pending`, per
# autograd.Function.apply running, [the record of a GEMM awaiting the Function's node
# (await_backward_node), the TE module record that node is to keep]; `profiled`, per record range
# open, its torch.profiler handle (push); `autocast_regions`, te.autocast regions whose range is open
# (gemmscope_te.patch_quantization).
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


# What the hook calls under torch besides the entry points it patches: writing a record
# (push, pop, mark, a capture's start and end), reading the running module and whether torch
# compiles (gemmscope_modules.bind) and capturing with torch.profiler (gemmscope_torch_profiler).
TORCH_INTERNALS = ("_C._autograd._profiler_enabled", "ops.profiler._record_function_enter_new",
                   "ops.profiler._record_function_exit._RecordFunction", "cuda.nvtx.range_push",
                   "cuda.nvtx.range_pop", "cuda.nvtx.mark", "cuda.nvtx.range_start", "cuda.nvtx.range_end",
                   "nn.Module._call_impl", "compiler.is_compiling", "_C._current_autograd_node",
                   "profiler.profile", "profiler.schedule", "profiler.supported_activities", "profiler.ProfilerActivity")


def bind(torch) -> None:
    """Looks up, once torch is imported, what writing a record asks of it at every call."""
    global _profiler_enabled
    _profiler_enabled = torch._C._autograd._profiler_enabled


# Whether GEMM calls are recorded now: always, but under `verify --steps A-B` only while its capture
# is open (gemmscope_steps.record_only_in). Outside it nothing reads a record, and each one costs
# the program's thread tens of microseconds of Python per GEMM call. Autocast regions and step marks
# are recorded throughout: they are few, and a region's range must pop what it pushed.
recording = [True]


def bound() -> bool:
    """bind ran: records can be written (no patch may push one before)."""
    return _profiler_enabled is not None


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


def _nvtx(write, *args) -> None:
    """One NVTX write, looked up by the caller at each call (a program or test may replace the
    writers later). A torch without NVTX (a CPU build) refuses every one, unsaid: it runs no GPU
    kernel for a record to explain, and its records reach torch.profiler all the same."""
    try:
        write(*args)
    except Exception:  # never break the program being checked
        pass


def push(torch, label: str) -> None:
    _record_made()
    _nvtx(torch.cuda.nvtx.range_push, label)
    handles = thread.__dict__.get("profiled")
    if handles is None:
        handles = thread.profiled = []
    handles.append(torch.ops.profiler._record_function_enter_new(label, None) if _profiler_enabled() else None)


def pop(torch) -> None:
    handles = thread.__dict__.get("profiled")
    handle = handles.pop() if handles else None
    if handle is not None:
        torch.ops.profiler._record_function_exit._RecordFunction(handle)
    _nvtx(torch.cuda.nvtx.range_pop)


def mark(torch, label: str) -> None:
    _record_made()
    _nvtx(torch.cuda.nvtx.mark, label)
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
            for label in _unpatched:  # beside the versions: in any capture that holds a record
                mark(torch, label)
        except Exception as exc:  # never break the program being checked
            note(f"software versions not recorded: {type(exc).__name__}")


# --- patching ---------------------------------------------------------------------------------

# Every patch goes through `patch`: a torch or TE release that moves or changes an entry point
# costs the records it feeds, never the program. What was skipped is said once on stderr and
# marked in the trace (UNPATCHED_PREFIX), so that the check can say which records are missing.
_unpatched: list = []  # the marks of this process's skipped patches, in order


def _version(root) -> str:
    package = sys.modules.get(root.__name__.partition(".")[0])
    return f"{package.__name__} {getattr(package, '__version__', UNKNOWN)}" if package is not None else UNKNOWN


def unpatched(what: str, version: str, why: str, misses: str) -> None:
    """`what` could not be patched in `version`, for `why`; the trace lacks `misses`. Said and
    marked once per entry point, however often its patch is asked."""
    if any(parse_record(UNPATCHED_PREFIX, label)["what"] == str(what).replace(FIELD_SEPARATOR, "/")
           for label in _unpatched):
        return
    note(f"{what} not patched in {version} ({why}): {misses} not recorded; the program runs on unwatched there")
    fields = {"what": what, "version": version, "why": why, "misses": misses}
    label = format_record(UNPATCHED_PREFIX, {k: str(v).replace(FIELD_SEPARATOR, "/") for k, v in fields.items()})
    _unpatched.append(label)
    torch = sys.modules.get("torch")
    if torch is not None and bound():
        try:  # now too: a capture of the whole run holds it even where no GEMM is recorded
            mark(torch, label)
        except Exception:  # torch.profiler refused it: marked again beside the software versions
            pass


def _is_class_method(stored) -> bool:
    # a Python classmethod, or one a C extension defines (torch 2.14's autograd.Function.apply)
    return isinstance(stored, classmethod) or type(stored).__name__ == "classmethod_descriptor"


def patch(root, path: str, wrap, misses: str, optional: bool = False) -> bool:
    """Replaces the callable at `path` (dotted, under the module `root`) by wrap(original), where
    original is called as the entry point was; for a class method, wrap's function takes the class
    first, as a classmethod's does, however the release defines the method. False, said
    (unpatched) and the entry point left as it was, where anything fails; `optional`: an entry
    point this release lacks is no loss (a later TE's addition), and is skipped unsaid."""
    what = f"{root.__name__}.{path}"
    *owner_path, attribute = path.split(".")
    try:
        owner = root
        for part in owner_path:
            owner = getattr(owner, part)
        if optional and not hasattr(owner, attribute):
            return False
        stored = inspect.getattr_static(owner, attribute)
        if isinstance(owner, type) and _is_class_method(stored):
            def original(cls, *args, **kwargs):
                return stored.__get__(None, cls)(*args, **kwargs)

            original.__name__ = attribute
            setattr(owner, attribute, classmethod(wrap(original)))
        else:
            current = getattr(owner, attribute)
            if not callable(current):
                raise TypeError(f"{type(current).__name__} is not callable")
            setattr(owner, attribute, wrap(current))
    except Exception as exc:  # never break the program being checked
        unpatched(what, _version(root), f"{type(exc).__name__}: {exc}", misses)
        return False
    return True


def guarded(what: str, root, misses: str, call) -> bool:
    """call() for a part of the hook that is no single entry point (binding to torch's internals,
    a module's patches as a whole): False, said as `patch` says it, where it fails."""
    try:
        call()
    except Exception as exc:  # never break the program being checked
        unpatched(what, _version(root), f"{type(exc).__name__}: {exc}", misses)
        return False
    return True


def note_untested_torch(torch) -> None:
    """Says once, as torch is imported, that its release is outside those the hook is tested on."""
    try:
        release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    except ValueError:
        return
    oldest, newest = (tuple(int(part) for part in v.split(".")) for v in TESTED_TORCH)
    if not oldest <= release <= newest:
        note(f"torch {torch.__version__} is outside the releases gemmscope's hook is tested on "
             f"({TESTED_TORCH[0]} to {TESTED_TORCH[1]}): records may be missing, and each one that is is said")
