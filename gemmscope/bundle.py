"""`gemmscope bundle`: one zip holding what a bug report needs, and no secret.

From traces (files, folders or globs: one per rank, or one holding every rank):

- `report.md` and `report.html`: `gemmscope report`'s Markdown and page, the same report as
  `gemmscope analyze --format markdown`, the breakdown and findings included;
- `analysis.json`: the same as `analyze --format json`;
- `tables/NAME.csv`: the tables of `gemmscope report --tables` (report.tables.TABLE_FILES);
- `traces/NAME.sqlite.xz`: each trace, scrubbed (`gemmscope.redaction.scrub`).

From a `gemmscope profile` run directory: `report.md`, `report.html` and `results.json` as the
run writes them,
`tables/NAME.csv` as for traces, and its trace scrubbed as `trace.sqlite.xz`, so that the
unzipped bundle is itself a run directory.

And `environment.json` (gemmscope/schemas/environment.schema.json): per trace, the GPUs, the driver, the CUDA version the driver supports,
the nsys that exported it, the OS and the command line nsys launched, redacted; torch's, its
CUDA's, Transformer Engine's and cuBLASLt's versions where gemmscope verify's hook recorded them;
the recipes the run recorded (for a run directory: the recipes it profiled). What a trace does
not record is null, never guessed: no nsys table records those versions.

The reports are made from the scrubbed traces in the zip, under their names there, so the
bundle re-analyzes to the same: unzipped, `gemmscope analyze` of the traces `analysis.json`'s
`meta.traces` lists, in that order and with the same --expect, --expect-map, --allow and
--step-range, gives `analysis.json` again, and `gemmscope report` of them with `--tables DIR`
gives the same files as `tables/`; for a run directory, `gemmscope report` of the unzipped
bundle gives `tables/` again. Traces that read but cannot be analyzed (no GPU kernel, several
recipes and no --expect, a profile run that stopped before its first GEMM) are bundled all the
same, with the reason in report.md (and no analysis.json, results.json or tables): that is often
the bug being reported.

Every text member is made from what one `redaction.Redactor` redacted, built from what all the
traces recorded (`scrub.recorded_redactor`), the same one that scrubs the traces.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any, NamedTuple

from gemmscope.assembly import te_ranges
from gemmscope.common import interruptible, scratch
from gemmscope.common.atomic import written_whole
from gemmscope.common.jsonable import frame_records
from gemmscope.errors import InputError
from gemmscope.judging.judgement import recorded_recipes
from gemmscope.plan.profile_run import RUN_TRACES, load_run
from gemmscope.redaction.policy import REDACTED, Redactor
from gemmscope.redaction.scrub import check_output, recorded_redactor, scrub
from gemmscope.report import render
from gemmscope.report.documents import SCHEMA_VERSION
from gemmscope.report.model import Report, redacted
from gemmscope.report.profile import profile_report
from gemmscope.report.tables import csv_text
from gemmscope.traces.model import Trace
from gemmscope.traces.nsys_tables import recorded_environment
from gemmscope.traces.read import KINETO_SUFFIXES, TRACE_SUFFIXES, read_trace, redactable_source


class Bundle(NamedTuple):
    path: Path
    redactor: Redactor  # its counts: what was redacted
    analysis_error: str | None  # why the traces could not be analyzed (report.md says it too)


# The report of traces scrubbed for the zip, read under their names there; its Redactor (what
# scrubbed them) redacts it. gemmscope.Analysis makes it (Analysis.bundle): the JSON document
# `gemmscope analyze --per-launch`'s, so that a bug report keeps every GEMM launch.
TraceReport = Callable[[list[Trace], Redactor], Report]


def bundle_traces(paths: Sequence[str | Path], out: str | Path, keep: Sequence[str], report_of: TraceReport) -> Bundle:
    """Write the zip `out` from traces (`paths`: files, as traces.read.trace_paths gives them),
    their report made by `report_of`; `keep`: shell patterns of what the redaction leaves (Redactor)."""
    return _bundle([Path(p) for p in paths], Path(out), [Path(p) for p in paths], keep, report_of)


def bundle_run(run_dir: str | Path, out: str | Path, keep: Sequence[str] = ()) -> Bundle:
    """Write the zip `out` from a `gemmscope profile` run directory: unzipped, a run directory."""
    run_dir = Path(run_dir)
    paths = [run_dir / name for name in RUN_TRACES if (run_dir / name).exists()][:1]
    return _bundle(paths, Path(out), [run_dir], keep, None, run_dir)


def _bundle(paths: list[Path], out: Path, inputs: list[Path], keep: Sequence[str], report_of: TraceReport | None,
            run_dir: Path | None = None) -> Bundle:
    originals = [read_trace(path) for path in paths]
    sources = [redactable_source(t) for t in originals]  # a torch.profiler trace as it is
    check_output(out, [*inputs, *paths, *sources], "bundle")
    redactor = recorded_redactor(sources, keep)
    # The unzipped bundle of a run directory is a run directory.
    members = _member_names(originals, redactor) if run_dir is None else ["trace.sqlite.xz"] * len(originals)
    with tempfile.TemporaryDirectory(dir=scratch.folder()) as staging:
        # An nsys trace is scrubbed to SQLite, read from there and only then compressed for the
        # zip: read from its .xz it would be decompressed once more.
        staged = {member: scrub(trace, _staging_path(Path(staging), i, member), redactor)
                  for i, (member, trace) in enumerate(zip(members, originals))}
        recipes = recorded_recipes(originals) if run_dir is None else []
        try:
            if report_of is not None:
                report = report_of([dataclasses.replace(read_trace(path), path=Path(member))
                                    for member, path in staged.items()], redactor)
            else:
                assert run_dir is not None  # a run directory's report is made here
                report, recipes = _analyze_run(run_dir, Path(staging) if staged else run_dir)
                # Redacted before rendering, each distinct text once: html.escape turns & < > " ' into
                # entities, and JSON and CSV quote, which would hide a value from a pass over the text.
                report = redacted(report, redactor)
            error = None
        except InputError as exc:  # no results document then: only documents their schema describes
            error = redactor(str(exc))
            report = None
        environment = {
            "schema_version": SCHEMA_VERSION,
            # the installed version: the package's own __version__ is in its root, above every layer
            "bundled_by": f"gemmscope {version('gemmscope')}",
            "recipes": recipes or None,
            "traces": [_environment(trace, member) for member, trace in zip(members, originals)],
        }
        if report is None:
            texts = {"report.md": f"# gemmscope bundle\n\ngemmscope could not analyze what this bundle holds: "
                                  f"{error}\n"}
        else:
            texts = {"report.md": render(report, "markdown"), "report.html": render(report, "html"),
                     "analysis.json" if run_dir is None else "results.json": _json(report.document)}
            texts |= {f"tables/{name}": csv_text(table) for name, table in report.tables.items()}
        texts["environment.json"] = _json(redactor.document(environment))
        _write_zip(out, texts, {member: _compressed(path) for member, path in staged.items()})
    return Bundle(out, redactor, error)


def _member_names(traces: list[Trace], redactor: Redactor) -> list[str]:
    """Each trace's name in the zip: traces/ + its file name (redacted, as .sqlite.xz; a
    torch.profiler trace as .json.gz), numbered where two traces share a name (rank0/trace.sqlite
    and rank1/trace.sqlite)."""
    names: list[str] = []
    for trace in traces:
        name = trace.path.name
        stem = next((name.removesuffix(s) for s in (*TRACE_SUFFIXES, *KINETO_SUFFIXES[::-1]) if name.endswith(s)), name)
        stem = redactor(stem)
        suffix = ".sqlite.xz" if trace.made_by_nsys else ".json.gz"
        member, copies = f"traces/{stem}{suffix}", 1
        while member in names:
            copies += 1
            member = f"traces/{stem}-{copies}{suffix}"
        names.append(member)
    return names


def _staging_path(staging: Path, number: int, member: str) -> Path:
    """Where the `number`-th trace is scrubbed before it is zipped as `member`: a traces/ member by
    its number, so that a name as long as the system allows stays one when the scratch folder and a
    temporary suffix are put around it; a run directory's trace.sqlite.xz as trace.sqlite, where the
    run's own files look for it."""
    if "/" not in member:
        path = staging / member.removesuffix(".xz")
    else:
        path = staging / "traces" / f"{number}{'.json.gz' if member.endswith('.json.gz') else '.sqlite'}"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _analyze_run(run_dir: Path, scrubbed_run: Path) -> tuple[Report, list[str]]:
    """The run's report (its JSON document results.json) as `gemmscope profile` writes it, and
    the recipes the run profiled, from the scrubbed trace (`scrubbed_run` holds it; for a run
    made without nsys, the run directory itself)."""
    run = load_run(scrubbed_run)
    wall_s = _wall_s(run_dir)
    recipes = list(dict.fromkeys(run.gemms["precision"]))
    return profile_report(run, run_dir, wall_s), recipes


def _wall_s(run_dir: Path) -> float | None:
    """The whole run's wall time: only the run's results.json records it."""
    path = run_dir / "results.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())["wall_s"]
    except (ValueError, KeyError, TypeError):
        raise InputError(f"{path} is not a results.json written by gemmscope profile") from None


def _environment(trace: Trace, member: str) -> dict[str, Any]:
    """What `trace` records about the machine and the software it ran (null where nothing does;
    a torch.profiler trace records none of the system's settings nor the command line)."""
    system, commands = recorded_environment(trace.records) if trace.made_by_nsys else ({}, [])
    software = te_ranges.recorded_software(trace.range_names_starting(te_ranges.SOFTWARE_PREFIX)) or {}
    return {
        "trace": member,
        "gpus": frame_records(trace.gpus),
        "driver": _recorded(system.get("NvDriverVersion")),
        "cuda_driver": _cuda_version(system.get("CudaDriverVersion")),  # the CUDA version the driver supports
        # No table of an nsys export records these; gemmscope verify's hook marks them.
        "torch": software.get("torch"),
        "cuda": software.get("cuda"),
        "transformer_engine": software.get("transformer_engine"),
        "cublas": software.get("cublaslt"),
        "nsys": trace.meta["nsys_version"],  # the nsys that exported the trace: the export records no other
        "os": _recorded(system.get("OsDescription")),
        # Shell-quoted, but an argument scrub took out of an already shared trace reads [redacted].
        "command_lines": [" ".join(a if a == REDACTED else shlex.quote(a) for a in argv) for argv in commands],
    }


def _recorded(value: Any) -> str | None:
    """A recorded setting, or None where nsys recorded nothing (it writes 0 for the driver's
    version on a machine without an NVIDIA driver)."""
    return None if value in (None, "", "0", 0) else str(value)


def _cuda_version(value: Any) -> str | None:
    """The CUDA version as CUDA encodes it, 1000 × major + 10 × minor (13000: "13.0")."""
    value = _recorded(value)
    if value is None or not value.isdigit():
        return value
    return f"{int(value) // 1000}.{int(value) % 1000 // 10}"


def _json(document: Any) -> str:
    return json.dumps(document, indent=2) + "\n"


def _compressed(staged: Path) -> Path:
    """A staged trace as the zip holds it: SQLite xz-compressed, a torch.profiler trace as it is (gzip)."""
    if staged.suffix != ".sqlite":
        return staged
    compressed = staged.with_name(staged.name + ".xz")
    interruptible.xz_compress(staged, compressed)
    return compressed


def _write_zip(out: Path, texts: dict[str, str], files: dict[str, Path]) -> None:
    """The zip, through a temporary name: a failure leaves nothing half-written."""
    with written_whole(out) as partial, zipfile.ZipFile(partial, "w") as archive:
        for name, text in texts.items():
            archive.writestr(name, text, compress_type=zipfile.ZIP_DEFLATED)
        for name, path in files.items():
            archive.write(path, name, compress_type=zipfile.ZIP_STORED)  # already xz- or gzip-compressed
