"""Every output of every command that reads traces holds none of the secrets planted in them:
analyze, verify --trace (every --format, --verbose, --quiet, --per-launch, --plots), diagnose,
compare, report (HTML, Markdown, --tables), bundle (every member) and scrub; stdout, stderr and
every file written. One redaction policy (gemmscope.redaction.policy) for all of them.

Secrets are planted into copies of committed real traces with SQL and JSON, where a program's
own text lands: the layer and name fields of gemmscope's hook records (what the tables show), an
NVTX range around every launch, the program's printed output, nsys's records of the command
line, environment, user and host, and the trace's file name (nsys names its reports after the
host when asked, `-o %h`); in a torch.profiler trace, its host name, its hook records and an
annotation. Some have a shape a rule knows (tokens, e-mail, host, IP, JWT, home paths, URLs
with a user), some none, redacted only because the trace recorded them as secret (a password
on the command line, an API key in the environment). --no-redact shows them, so each case
would fail if the output it checks were not redacted.
"""

from __future__ import annotations

import gzip
import json
import lzma
import secrets
import sqlite3
import string
import zipfile
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner

from gemmscope.cli import main

from fixture_paths import CORPUS, GPU_KINETO
from planted_secrets import Planted, plant, random_text
from sqlite_text import all_text


def _plant(planted: Planted) -> str:
    """Secrets of every kind, as a program prints them."""
    user = planted.add("user", "u", random_text(9, string.ascii_lowercase))
    return " ".join([
        f"mail {planted.add('email', 'ops.', random_text(8, string.ascii_lowercase), '@example-corp.com')}",
        f"on {planted.add('ip', '10.', '.'.join(str(secrets.randbelow(250) + 1) for _ in range(3)))}",
        f"token {planted.add('hf', 'hf_', random_text(34))} {planted.add('ghp', 'ghp_', random_text(36))}",
        f"aws {planted.add('aws', 'AKIA', random_text(16, string.ascii_uppercase + string.digits))}",
        f"jwt {planted.add('jwt', 'eyJ', random_text(20), '.eyJ' + random_text(12) + '.' + random_text(12))}",
        f"ckpt /home/{user}/ckpt and C:\\Users\\{planted.add('windows user', 'w', random_text(9, string.ascii_lowercase))}"
        f"\\proj and C:/Users/{planted['windows user']}/proj",
        f"clone https://{planted.add('url user', 'g', random_text(8, string.ascii_lowercase))}:"
        f"{planted.add('url token', 'p', random_text(18))}@git.internal/x.git",
        f"wandb {planted['wandb']} password {planted['password']}",  # shapeless: the trace recorded them as secret
    ])


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> tuple[Path, Path, Planted]:
    """An nsys export (TE stack, FP8 block, gemmscope's hook) and a torch.profiler trace (the
    same model), secrets planted in both; named after the planted host."""
    planted = Planted()
    folder = tmp_path_factory.mktemp("planted")
    host = planted.add("host", "gpu-", random_text(6, string.ascii_lowercase + string.digits), ".corp.example.com")
    planted.add("wandb", "", random_text(40, "0123456789abcdef"))
    planted.add("password", "", random_text(16))
    text = _plant(planted)
    nsys_trace = folder / f"{host}.sqlite"
    nsys_trace.write_bytes(lzma.decompress((CORPUS / "te_stack_large_fp8-block_1gpu.sqlite.xz").read_bytes()))
    with closing(sqlite3.connect(nsys_trace)) as conn:
        # the layer and the name the hook records: what the tables show of each GEMM
        renamed = ("|layer=head|", f"|layer=head.{planted['user']}|", "|name=Layer_5|", f"|name=Layer_5 {planted['hf']}|")
        conn.execute("UPDATE NVTX_EVENTS SET text = replace(replace(text, ?, ?), ?, ?) WHERE text IS NOT NULL", renamed)
        conn.execute("UPDATE StringIds SET value = replace(replace(value, ?, ?), ?, ?) "
                     "WHERE id IN (SELECT textId FROM NVTX_EVENTS)", renamed)
        # a GEMM kernel named after the user (compare lists the GEMM kernels that changed)
        conn.execute("UPDATE StringIds SET value = value || ? WHERE value = ?",
                     (f"-{planted['user']}", "nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_coopA_algo2_Ablk128_Bvec128_TNN"))
        plant(conn, text, arguments=["--password", planted["password"]],
              environment=f'WANDB_API_KEY="{planted["wandb"]}"', user=planted["user"], host=host)
    assert not set(planted.values) - set(planted.found("\n".join(all_text(nsys_trace))))
    # A torch.profiler trace records its host's name and the program's annotations, no environment.
    kineto_trace = folder / f"{host}.rank0.json.gz"
    document = json.loads(gzip.decompress((GPU_KINETO / "te_stack_fp8-block_1gpu.rank0.json.gz").read_bytes()))
    document = {"host_name": host, **document}  # in the head, before the events, where the reader reads it
    events = document["traceEvents"]
    for event in events:
        if event.get("cat") == "user_annotation" and "|layer=head|" in event["name"]:
            event["name"] = event["name"].replace("|layer=head|", f"|layer=head.{host}|")
    first = min(e["ts"] for e in events if e.get("ph") == "X")
    events.append({"ph": "X", "cat": "user_annotation", "name": " ".join(text.split(" wandb ")[:1]),
                   "pid": events[0].get("pid", 0), "tid": events[0].get("tid", 0), "ts": first - 1,
                   "dur": max(e["ts"] + e.get("dur", 0) for e in events if e.get("ph") == "X") - first + 2})
    kineto_trace.write_bytes(gzip.compress(json.dumps(document).encode()))
    return nsys_trace, kineto_trace, planted


# The traces the planted ones are compared with: as committed, nothing planted.
ORIGINALS = {"nsys": CORPUS / "te_stack_large_fp8-block_1gpu.sqlite.xz",
             "torch.profiler": GPU_KINETO / "te_stack_fp8-block_1gpu.rank0.json.gz"}


def _run(args: list[str]) -> tuple[int, str]:
    done = CliRunner().invoke(main, args, catch_exceptions=False)
    return done.exit_code, done.stdout + done.stderr


def _written(folder: Path) -> str:
    """Every file under `folder` as text: a zip's members, xz and gzip decompressed, an SQLite
    file's every text value (a long value may straddle pages, where its bytes are not contiguous)."""
    texts = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        texts += _texts(path.name, path.read_bytes(), folder)
    return "\n".join(texts)


def _texts(name: str, data: bytes, folder: Path) -> list[str]:
    if name.endswith(".zip"):
        with zipfile.ZipFile(folder / name) as archive:
            return [t for member in archive.namelist() for t in _texts(member, archive.read(member), folder)]
    if name.endswith(".xz"):
        return _texts(name.removesuffix(".xz"), lzma.decompress(data), folder)
    if name.endswith(".gz"):
        return _texts(name.removesuffix(".gz"), gzip.decompress(data), folder)
    if data.startswith(b"SQLite format 3\x00"):
        copy = folder.parent / f"{folder.name}-{name.replace('/', '-')}.sqlite"
        copy.write_bytes(data)
        return [name, *all_text(copy)]
    return [name, data.decode("utf-8", "replace")]


# command line (TRACE and BASE/NEW stand for the planted traces, OUT for a new folder) -> whether
# it shows a planted text with --no-redact (analyze, verify, diagnose and compare have it; the
# verdict block alone names nothing the program wrote). --expect bf16: mismatches, listed with
# their layers.
CASES = {
    "analyze TRACE --expect bf16": True,
    "analyze TRACE --verbose": True,
    "analyze TRACE --quiet": False,
    "analyze TRACE --format json": True,
    "analyze TRACE --format json --per-launch": True,
    "analyze TRACE --format jsonl": True,
    "analyze TRACE --format csv": True,
    "analyze TRACE --format markdown": True,
    "analyze TRACE --plots OUT": False,  # PNG files: their text is pixels (drawn from redacted names)
    "verify --trace TRACE --expect bf16": True,
    "verify --trace TRACE --verbose": True,
    "verify --trace TRACE --format json --per-launch": True,
    "verify --trace TRACE --format jsonl": True,
    "verify --trace TRACE --format csv": True,
    "verify --trace TRACE --format markdown": True,
    "diagnose TRACE": False,  # time per category and findings: no name the program gave
    "compare BASE NEW": True,
    "compare BASE NEW --format json": True,
    "compare BASE NEW --format markdown": True,
    "report TRACE -o OUT/report.html --tables OUT/tables": False,
    "report TRACE -o OUT/report.md": False,
    "report TRACE -o -": False,
    "bundle TRACE -o OUT/issue.zip": False,
    "scrub TRACE -o OUT/shared.sqlite.xz": False,
    "whatif TRACE --out OUT": True,  # without a GPU: the groups (module paths) and the report files
    "whatif TRACE --format json": True,
}


def _args(case: str, trace: Path, original: Path, out: Path) -> list[str]:
    names = {"TRACE": trace, "BASE": trace, "NEW": original, "OUT": out}
    return [arg.replace("OUT", str(out)) if arg.startswith("OUT") else str(names.get(arg, arg))
            for arg in case.split()]


@pytest.mark.parametrize("reader", ["nsys", "torch.profiler"])
@pytest.mark.parametrize("case", CASES)
def test_no_output_holds_a_planted_secret(traces, tmp_path, case, reader):
    nsys_trace, kineto_trace, planted = traces
    trace = nsys_trace if reader == "nsys" else kineto_trace
    command = case.replace(".sqlite.xz", ".json.gz") if case.startswith("scrub") and reader != "nsys" else case
    out = tmp_path / "out"
    out.mkdir()
    code, printed = _run(_args(command, trace, ORIGINALS[reader], out))
    assert code in (0, 1), printed  # 1: the run's mismatches
    assert planted.found(printed + _written(out)) == []
    if CASES[case]:  # the same without the redaction shows what was planted: the case checks something
        unredacted = tmp_path / "unredacted"
        unredacted.mkdir()
        _, printed = _run(_args(command, trace, ORIGINALS[reader], unredacted) + ["--no-redact"])
        assert planted.found(printed + _written(unredacted))


def test_a_failed_commands_last_lines_hold_no_secret_of_its_environment(nsys_bin, monkeypatch):
    """verify -- COMMAND says a failed command's last lines on stderr, redacted with what the
    command's environment says is secret (a value without any shape, secret by its variable's
    name) and whose home it is."""
    planted = Planted()
    monkeypatch.setenv("NSYS", nsys_bin)
    monkeypatch.setenv("MY_API_KEY", planted.add("MY_API_KEY", "", random_text(20)))
    monkeypatch.setenv("USER", planted.add("user", "u", random_text(9, string.ascii_lowercase)))
    script = 'echo "connecting with $MY_API_KEY as $USER from /home/$USER/run" >&2; exit 3'
    code, printed = _run(["verify", "--", "sh", "-c", script])
    assert code == 3, printed
    assert planted.found(_gemmscopes_lines(printed)) == []
    code, printed = _run(["verify", "--no-redact", "--", "sh", "-c", script])
    assert code == 3 and sorted(planted.found(_gemmscopes_lines(printed))) == ["MY_API_KEY", "user"]


def _gemmscopes_lines(printed: str) -> str:
    """What gemmscope itself says (its own lines, and the failed command's last lines it repeats,
    indented), not the command's own output, which reaches the terminal as the command writes it."""
    lines = printed.splitlines()
    said = [line for line in lines if line.startswith(("gemmscope:", "    "))]
    assert any(line.startswith("    connecting with") for line in said), printed
    return "\n".join(said)
