"""The NVTX ranges and marks gemmscope's start-up hook records in a profiled program (and, while
torch.profiler records, the same labels as ``record_function`` ranges, a mark as an empty one).

This file is imported both by the hook (``sitecustomize`` beside it, inside the profiled program,
which must not import gemmscope) and by gemmscope's trace reader, so that the labels are written
and read from one definition. It has no side effects and imports nothing.

A record is a prefix followed by ``key=value`` fields separated by ``|``:

- ``gemmscope.autocast(recipe=<RecipeClass>)``: a range around each ``te.autocast`` region
  (``disabled`` for ``enabled=False``);
- ``gemmscope.te_gemm|entry=…|module=…|name=…|layer=…|pass=…|a=…|b=…``: a range around every GEMM
  call Transformer Engine's Python makes, pushed on the launching thread, so that the kernels it
  launches sit inside it. ``module`` is the TE module or fusible operation class that called it,
  ``name`` its own name (``name=`` or userbuffers name) when it has one, ``layer`` its place in
  the model (the attribute path from the outermost module, wrappers such as FSDP's left out),
  ``owner`` is the innermost ``nn.Module`` of any kind around the
  call (Megatron's MoE router hands TE its GEMM from a module of its own), ``pass`` follows from the GEMM's layout (TE calls fprop TN, dgrad NN, wgrad NT), ``a`` /
  ``b`` are the operand types TE was handed (see OPERAND_TYPES), ``m``, ``n``, ``k`` the GEMM's
  shape (output M×N, K contracted; absent for grouped calls) and ``flops`` its 2·M·N·K (summed
  over a grouped call's members); ``members`` a grouped call's member GEMMs (MEMBERS_FIELD:
  format_members) where TE handed them as lists of operands (general_grouped_gemm), absent where
  the hook could not read them;
- ``gemmscope.torch_gemm|op=…|module=…|layer=…|pass=…|a=…|b=…|scale=…``: the same for a GEMM that
  does not go through TE: a call of ``torch.nn.functional.linear``, ``torch.matmul`` / ``mm`` /
  ``bmm`` / ``addmm`` / ``baddbmm`` (and their Tensor methods, ``@``) or ``torch._scaled_mm``, on
  the launching thread. ``module`` is the class of the innermost ``nn.Module`` whose forward made
  it, ``layer`` that module's path; ``a`` / ``b`` the operands' types (``fp8`` for float8 tensors);
  ``scale`` how ``_scaled_mm`` was asked to scale them (SCALINGS). Its backward GEMMs are
  recorded too: for a GEMM autograd differentiates in C++ (``MmBackward0`` ...) a range around
  that node (``op`` its name, ``pass=backward``: the node runs the dgrad and the wgrad GEMM); for
  one inside a custom ``autograd.Function`` (Megatron's, torchao's) the ``torch_gemm`` calls of its
  backward, each with the module and layer of the forward call and a pass from its shape;
- ``gemmscope.process|rank=…|local_rank=…|world_size=…``: a mark once per process that imports
  TE, naming its rank when a launcher (torchrun, mpirun, SLURM) set one;
- ``gemmscope.step|n=…``: a mark at the end of every optimizer step, ``n`` the training iteration
  (from 0; one iteration may step several optimizers, gemmscope_steps.py): step n runs from the
  last mark of n-1 to its own last (step 0 from the process's first kernel launch);
  ``gemmscope.step|watching=optimizers`` once, as torch is imported: steps are watched for;
- ``gemmscope.capture``: a start/end range around the steps ``gemmscope verify --steps`` asks for
  (one step more on each side), which nsys's ``--capture-range=nvtx`` collects;
- ``gemmscope.software|torch=…|cuda=…|transformer_engine=…|cublaslt=…``: a mark once per process,
  at its first TE GEMM call, with the versions a bug report needs and no nsys table records
  (``cuda``: the CUDA torch was built with; ``cublaslt``: the cuBLASLt TE loaded).
- ``gemmscope.unpatched|what=…|version=…|why=…|misses=…``: a mark per entry point of torch or TE
  the hook could not patch in this process (a release that moved or changed it): ``what`` the
  entry point, ``version`` the release it was looked for in, ``why`` the error, ``misses`` the
  records the trace then lacks. Made when the patch is skipped and again beside the software mark,
  so that a capture of a window holds it too; the program runs on, unwatched there.

``gemmscope verify --profiler torch`` captures with torch.profiler instead of nsys: it names a
folder in TORCH_TRACE_FOLDER, and the hook, in every process of the command that imports torch,
records from then on and, at the process's exit, writes the trace there (torch_trace_name) if the
process used CUDA.
"""

AUTOCAST_PREFIX = "gemmscope.autocast(recipe="
# A recipe's backward_override (TE 2.20: every recipe but delayed scaling takes it, by default from
# NVTE_BACKWARD_OVERRIDE): its backward GEMMs then run on high-precision or dequantized operands.
# The autocast range carries it, and whether that environment variable set it:
# ``gemmscope.autocast(recipe=Float8CurrentScaling|backward_override=high_precision|from=NVTE_BACKWARD_OVERRIDE)``.
BACKWARD_OVERRIDE = "backward_override"
BACKWARD_OVERRIDE_ENV = "NVTE_BACKWARD_OVERRIDE"
OVERRIDE_FROM = "from"
# Megatron-Core's per-module recipe (TransformerConfig.quant_recipe: --te-precision-config-file's
# glob matchers -> configs): the te.autocast a module enters for its own recipe carries the config
# key that asked, the matcher's pattern that chose it, the module's layer path and, where its
# evaluation recipe ran, the phase:
# ``gemmscope.autocast(recipe=disabled|quant_config=bf16|matcher=*linear_proj*|layer=decoder.layers.1.self_attention.linear_proj)``.
MODULE_RECIPE_FIELDS = ("quant_config", "matcher", "layer", "phase")
EVALUATION_PHASE = "evaluation"
GEMM_PREFIX = "gemmscope.te_gemm|"
TORCH_GEMM_PREFIX = "gemmscope.torch_gemm|"
PROCESS_PREFIX = "gemmscope.process|"
SOFTWARE_PREFIX = "gemmscope.software|"
UNPATCHED_PREFIX = "gemmscope.unpatched|"
STEP_PREFIX = "gemmscope.step|"
CAPTURE_RANGE = "gemmscope.capture"
FIELD_SEPARATOR = "|"
UNKNOWN = "?"

# The torch releases, oldest and newest, the hook is tested on: CI runs its tests on both (.ci/run),
# README says the range, pyproject's `gpu` extra starts there, and the hook says so at run time on
# a torch outside it.
TESTED_TORCH = ("2.11", "2.14")

# TE's GEMM layouts per pass (transformer_engine/pytorch/module/linear.py: general_gemm(weight,
# inp, layout="TN"), (weight, grad_output, layout="NN", grad=True), (inp, grad_output, "NT")).
PASS_BY_LAYOUT = {"TN": "fprop", "NN": "dgrad", "NT": "wgrad"}
# A backward GEMM of a torch_gemm record whose shape does not say whether it is the dgrad or the wgrad.
BACKWARD = "backward"

# How torch._scaled_mm was asked to scale its float8 operands, from the scales' shapes and types:
# one scale per tensor, one per row of A and column of B ("rowwise", torchao's axiswise recipe),
# per 1x128 / 128x128 blocks, per 32-element blocks with e8m0 scales (MX), and "rowwise-rescaled":
# a row-wise request torchao runs as a tensor-wise _scaled_mm followed by its own rescale (its
# float8_ops.addmm_float8_unwrapped does so when use_fast_accum is off).
# "emulated-<scaling>": a float8 GEMM torchao emulates on purpose (Float8LinearConfig.emulate:
# an FP32 torch.mm of the dequantized operands, for CI and debugging), recorded as the float8
# request it stands for.
SCALINGS = ("tensorwise", "rowwise", "rowwise-rescaled", "blockwise", "mx")
EMULATED = "emulated-"

# What an operand handed to a TE GEMM can be: a plain tensor's dtype, or a quantized tensor named
# after the quantizer that made it (the recipe), or after its storage class when it has none.
OPERAND_TYPES = (
    "bf16", "fp16", "fp32", "fp8-delayed", "fp8-current", "fp8", "fp8-block", "mxfp8", "nvfp4", "fp4",
)


# A grouped GEMM call's members (TE's general_grouped_gemm: one GEMM per expert) as a record field,
# "<count>:<M>x<N>x<K>": each of M, N, K one number every member shares or, where the members
# differ, their values in order joined by ","; e.g. a forward of 4 experts with 1024 in- and 2048
# out-features: "4:310,198,0,516x2048x1024" (the token counts, TE's m_splits, in M; a wgrad's in K).
MEMBERS_FIELD = "members"
_MEMBER_DIMS = "x"
_MEMBER_VALUES = ","
# More members than any MoE layer has experts (DeepSeek-V3: 256): a field claiming more is not
# one the hook wrote, and is not expanded.
_MAX_MEMBERS = 1 << 16


def format_members(shapes: list) -> str:
    """The members field of a grouped call from its members' (M, N, K), in order (at least one)."""
    dims = []
    for values in zip(*shapes):
        dims.append(str(values[0]) if len(set(values)) == 1 else _MEMBER_VALUES.join(map(str, values)))
    return f"{len(shapes)}:{_MEMBER_DIMS.join(dims)}"


def parse_members(text: str) -> list[tuple[int, int, int]] | None:
    """The members' (M, N, K) from a members field, None when it is not one format_members wrote."""
    count, _, dims = text.partition(":")
    parts = dims.split(_MEMBER_DIMS)
    if not count.isdigit() or not 1 <= int(count) <= _MAX_MEMBERS or len(parts) != 3:
        return None
    columns = []
    for part in parts:
        values = part.split(_MEMBER_VALUES)
        if not all(v.isdigit() for v in values) or len(values) not in (1, int(count)):
            return None
        columns.append([int(v) for v in values] * (int(count) if len(values) == 1 else 1))
    return list(zip(*columns))


# The environment variable naming the folder torch.profiler traces are written into.
TORCH_TRACE_FOLDER = "GEMMSCOPE_TORCH_TRACE_FOLDER"
# The environment variable naming the training steps to capture, "A-B" (inclusive, from 0).
STEPS = "GEMMSCOPE_STEPS"
# The environment variable naming an audit's windows, "EVERY:WINDOW:FIRST": WINDOW training steps
# every EVERY steps (a number) or every EVERY of wall time (a period with its unit: 30s, 30m, 2h),
# from step FIRST on, each captured as a window of its own (gemmscope_steps.CaptureWindows).
AUDIT = "GEMMSCOPE_AUDIT"
# Where an audit's first window starts by default: after the warm-up steps (compilation,
# autotuning, the allocator's growth) that no later step repeats.
AUDIT_FIRST_STEP = 10
# A period of wall time's units, in seconds.
PERIOD_UNITS = {"s": 1, "m": 60, "h": 3600}


def format_audit(every: int | str, window: int, first: int = AUDIT_FIRST_STEP) -> str:
    return f"{every}:{window}:{first}"


def parse_period(text: str) -> float:
    """A period of wall time, "30s", "30m" or "2h" (PERIOD_UNITS), in seconds; ValueError, its
    sentence the reason, unless a number above 0 with one of those units."""
    number, unit = text[:-1], text[-1:]
    try:
        seconds = float(number) * PERIOD_UNITS[unit]
    except (KeyError, ValueError):
        raise ValueError(f"{text!r} is neither a number of steps nor a period of wall time with its unit "
                         "(s, m or h: 30s, 30m, 2h)") from None
    if not seconds > 0:
        raise ValueError(f"{text!r}: give a period of wall time above 0")
    return seconds


def parse_audit(text: str) -> tuple[int | None, float | None, int, int]:
    """"EVERY:WINDOW:FIRST" as (every steps, every seconds, window, first), one of the first two
    None; ValueError, its sentence the reason, unless 1 <= WINDOW, WINDOW + 2 < EVERY steps (the
    one-step margins of two windows do not meet) or EVERY a period (parse_period), and 0 <= FIRST."""
    every, window, first = text.rsplit(":", 2)
    steps = int(every) if every.isdigit() else None
    seconds = None if steps is not None else parse_period(every)
    if not (int(window) >= 1 and (steps is None or steps > int(window) + 2) and int(first) >= 0):
        raise ValueError("give a window of 1 step or more, and windows more than 2 steps further apart than they "
                         "are long")
    return steps, seconds, int(window), int(first)


def audit_window(index: int, every: int, window: int, first: int) -> tuple[int, int]:
    """The steps (A, B) of an audit's window `index`, from 0."""
    start = first + index * every
    return start, start + window - 1


def audit_windows(every: int, window: int, first: int):
    """An audit's windows' steps, every `every` steps, in order, without end."""
    index = 0
    while True:
        yield audit_window(index, every, window, first)
        index += 1


# The environment variable naming a time window to capture with torch.profiler, "DELAY:DURATION"
# in seconds from the hook's import (DURATION empty: to the process's exit).
TIME_WINDOW = "GEMMSCOPE_TIME_WINDOW"


def format_time_window(delay_s: float | None, duration_s: float | None) -> str:
    return f"{delay_s or 0:g}:{'' if duration_s is None else f'{duration_s:g}'}"


def parse_time_window(text: str) -> tuple[float, float | None]:
    """"DELAY:DURATION" as (delay, duration or None); ValueError unless both are >= 0."""
    delay, _, duration = text.partition(":")
    window = float(delay or 0), float(duration) if duration else None
    if window[0] < 0 or (window[1] is not None and window[1] < 0):
        raise ValueError(f"time window {text!r}: want DELAY:DURATION, seconds >= 0")
    return window


def parse_steps(text: str) -> tuple[int, int]:
    """"A-B" (or "A": one step) as (A, B); ValueError unless 0 <= A <= B."""
    first, _, last = text.strip().partition("-")
    first_step, last_step = int(first), int(last or first)
    if not 0 <= first_step <= last_step:
        raise ValueError(f"steps {text!r}: want A-B with 0 <= A <= B")
    return first_step, last_step


def torch_trace_name(pid: int, rank: str, steps: tuple[int, int] | None = None) -> str:
    """A process's torch.profiler trace: its rank in the name where a launcher set one (gemmscope
    reads a rank from a name such as rank3), its pid always (a rank may run more than one process),
    and an audit window's steps (trace_steps reads them back)."""
    window = f".steps{steps[0]}-{steps[1]}" if steps is not None else ""
    return f"trace.{'' if rank == UNKNOWN else f'rank{rank}.'}{pid}{window}.json.gz"


def trace_steps(name: str) -> tuple[int, int] | None:
    """The steps of an audit window's trace from its name (torch_trace_name), None for another."""
    for part in name.split("."):
        if part.startswith("steps") and "-" in part:
            first, _, last = part[len("steps"):].partition("-")
            if first.isdigit() and last.isdigit():
                return int(first), int(last)
    return None


# Every name torch_trace_name gives, as a glob pattern.
TORCH_TRACE_GLOB = "trace.*.json.gz"


def format_autocast(recipe: str, backward_override: str | None, from_environment: bool,
                    module_recipe: dict | None = None) -> str:
    """The range around a te.autocast region: its recipe's class and, where set, its
    backward_override (BACKWARD_OVERRIDE) and whether BACKWARD_OVERRIDE_ENV set it, and the
    per-module recipe that entered it (MODULE_RECIPE_FIELDS)."""
    fields = [recipe]
    if backward_override:
        fields.append(f"{BACKWARD_OVERRIDE}={backward_override}")
        if from_environment:
            fields.append(f"{OVERRIDE_FROM}={BACKWARD_OVERRIDE_ENV}")
    for key, value in (module_recipe or {}).items():
        if key in MODULE_RECIPE_FIELDS and value:
            # a user's YAML names these: no separator, and no ")" that would end the range early
            fields.append(f"{key}={str(value).replace(FIELD_SEPARATOR, '/').replace(')', ']')}")
    return AUTOCAST_PREFIX + FIELD_SEPARATOR.join(fields) + ")"


def format_record(prefix: str, fields: dict) -> str:
    return prefix + FIELD_SEPARATOR.join(f"{key}={value}" for key, value in fields.items())


def parse_record(prefix: str, label: str) -> dict | None:
    """The fields of a record, or None when `label` is not one of this kind."""
    if not label.startswith(prefix):
        return None
    fields = {}
    for item in label[len(prefix):].split(FIELD_SEPARATOR):
        key, _, value = item.partition("=")
        fields[key] = value
    return fields
