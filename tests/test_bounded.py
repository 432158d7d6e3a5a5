"""Bounded time and memory whatever a trace holds: kernel names and NVTX names of any length are
decoded and redacted in time linear in them (each check in a subprocess that a quadratic pattern
would hold past its timeout), and the torch.profiler reader cuts long strings as it reads them
and refuses a gzip file that decompresses far beyond its size. Speed figures: benchmarks/bounded_names.py."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gemmscope.traces import kineto
from gemmscope.traces.kineto_json import MAX_STRING

from fixture_paths import GPU_KINETO
from trace_mutation import first_event, kineto_document, write_kineto

ROOT = Path(__file__).parent.parent
TRACE = GPU_KINETO / "torchao_rowwise.json.gz"
TIMEOUT = 60  # seconds, far above the few a linear pass takes: the old patterns took minutes


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


# Padding made of what kernel names are made of: word characters, the stems the rules look for
# (repeated, so that a pattern retried at each repeat shows), separators.
PADDING = st.lists(st.sampled_from(["a", "_", " ", "<", "::", "quantize", "cast_fp8", "amax", "Amax", "swizzle",
                                    "MergeStates", "token", "gemm", "sm90_", "fp8_quant"]), min_size=1, max_size=4)


@settings(max_examples=4, deadline=None)
@given(PADDING)
@example(["_", "a"])  # what took the old patterns past any timeout: "\w*X\w*" scanned from each place
@example(["gemm"])  # a stem the GEMM fallback rule looks for, in the names and in the word beside them
def test_kernel_names_with_64_kb_more_decode_as_they_do_alone(units):
    """Every name of the corpus with 64 KB appended (and every rule of the table searched over
    1 MB) decodes to its row's role, precision and rule; every public name of 2026 as it does alone."""
    pad = "".join(units) * (65536 // len("".join(units)))
    out = _python(f"""
import csv
from gemmscope.kernels import RULES, decode
rows = [r for r in csv.DictReader((l for l in open("tests/fixtures/kernel_names/corpus.tsv").read().splitlines()
        if not l.startswith("#")), delimiter="\\t")]
pad = {pad!r}
for row in rows:
    info = decode(row["name"] + pad)
    assert (info.role, info.precision or "", info.rule) == (row["role"], row["precision"], row["rule"]), row["name"]
public = [r for r in csv.DictReader(l for l in open("tests/fixtures/kernel_names/public-2026.csv", encoding="utf-8").read().splitlines()
          if not l.startswith("#"))]
# a word of its own, not the name's; with no "gemm" in it, which makes any name a GEMM of unknown
# placement by design (the gemm-unplaced rule)
word = pad.replace("gemm", "gem")
for row in public:
    bare, padded = decode(row["name"]), decode(row["name"] + " " + word)
    assert (padded.role, padded.precision, padded.rule) == (bare.role, bare.precision, bare.rule), row["name"]
rows += public
text = (pad * 16)[:1 << 20]
for rule in RULES:
    rule.pattern.search(text)
print(len(rows))
""")
    assert int(out) > 150


@settings(max_examples=4, deadline=None)
@given(PADDING)
@example(["token"])  # a secret word repeated: the old secret-name pattern rescanned from each
def test_a_1_mb_nvtx_name_is_redacted_whole(units):
    """A 1 MB range name, its secret at the end, loses the secret and keeps the rest."""
    out = _python(f"""
from gemmscope.redaction.policy import Redactor
head = ({"".join(units)!r} * (1 << 20))[:1 << 20]
name = head + " HF_TOKEN=hf_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC2eF4"
redacted = Redactor()(name)
assert redacted.endswith("HF_TOKEN=[redacted]"), redacted[-80:]
assert "hf_aB3dE5" not in redacted
print(len(redacted))
""")
    assert int(out) >= 1 << 20


# What the redaction rules look for: secret words and the separators of key/value forms, user@host,
# dotted names ending in a country's domain, per-user and Windows share paths, Authorization and Basic,
# what SQLite quotes of undecodable text.
REDACTION_PADDING = st.lists(st.sampled_from([
    "a", "_", " ", ":", "=", "token", "key: ", "auth", "_pass", "@", "a@", ".it", "a.b.", ".ac.", "/scratch/", "/users/",
    "/a", "\\\\", "//", "basic ", "Basic A1", "authorization", "-----BEGIN ", "/home/", "C:\\Users\\", "'",
    "Could not decode to UTF-8 column 'x' with text '"]), min_size=1, max_size=4)


@settings(max_examples=6, deadline=None)
@given(REDACTION_PADDING)
@example(["key: ", "a"])  # a key/value form whose value is one: each value searched once
@example(["a.b."])  # a dotted name that never ends in a domain
@example(["a@"])  # user@ with no host
def test_a_1_mb_name_of_what_the_rules_look_for_is_redacted_in_linear_time(units):
    """A 1 MB name made of what the rules look for, a secret at its end: redacted in the time a
    linear pass takes, the secret gone (with what a rule takes to the line's end: an unclosed
    quote's value, an Authorization header's)."""
    out = _python(f"""
from gemmscope.redaction.policy import Redactor
head = ({"".join(units)!r} * (1 << 20))[:1 << 20]
redacted = Redactor(names=["alice"], machine_names=["root"])(head + " HF_TOKEN=hf_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC2eF4")
assert redacted.endswith("[redacted]") and "hf_aB3dE5" not in redacted, redacted[-80:]
print(len(redacted))
""")
    assert int(out) > 0


def test_the_kernel_command_decodes_the_longest_name_a_command_line_holds():
    """Linux passes no argument longer than 128 KiB (MAX_ARG_STRLEN): a name of 100 KB."""
    name = "nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_TNT" + "_a" * 50_000
    done = subprocess.run([sys.executable, "-m", "gemmscope", "kernel", name], capture_output=True, text=True,
                          timeout=TIMEOUT, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-500:]
    assert "bf16" in done.stdout


def test_a_long_kernel_name_is_cut_as_read_and_said(tmp_path):
    document = kineto_document(TRACE)
    kernel = first_event(document, "kernel")
    name = kernel["name"]
    kernel["name"] = name + "é\\\"" * MAX_STRING
    trace = kineto.read(write_kineto(document, tmp_path / "long.json"))
    cut = [n for n in trace.kernels["name"] if len(n) > len(name) + 1000]
    assert cut and all(n.startswith(name) and len(n.encode()) <= MAX_STRING for n in cut)
    assert any("cut to its first" in line for line in trace.meta["lacks"])
    # a trace with nothing so long says nothing of it
    assert not any("cut to its first" in line for line in kineto.read(TRACE).meta["lacks"])


def test_a_gzip_trace_that_decompresses_far_beyond_its_size_is_refused(tmp_path):
    document = kineto_document(TRACE)
    first_event(document, "kernel")["name"] = "\x00"  # a placeholder the long name replaces
    head, tail = json.dumps(document).split('"\\u0000"', 1)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip
    bomb = tmp_path / "bomb.json.gz"
    with open(bomb, "wb") as f:
        f.write(compressor.compress(head.encode() + b'"'))
        block = b"a" * (1 << 20)
        for _ in range(256):
            f.write(compressor.compress(block))
        f.write(compressor.compress(b'"' + tail.encode()) + compressor.flush())
    assert bomb.stat().st_size < 1 << 20
    assert gzip.open(bomb).read(2) == b"{\""
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run([sys.executable, "-m", "gemmscope", "report", str(bomb), "-o", str(out / "r.html")],
                          capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert done.returncode == 2, done.stderr[-500:]
    assert len(done.stderr.strip().splitlines()) == 1 and "decompresses to more than" in done.stderr
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("size", [13, 64, 4096])  # a string is cut 12 bytes into a chunk at the earliest
def test_cut_strings_stay_valid_json_whatever_the_chunks(monkeypatch, size):
    """A string cut keeps whole characters and escapes (a surrogate pair, \\\\, \\u00e9) across
    chunk boundaries: what is kept parses and starts the string."""
    import io

    import ijson

    from gemmscope.traces import kineto_json

    monkeypatch.setattr(kineto_json, "MAX_STRING", 50)
    texts = ["a\\\"é𝄞\n\x01" * 20, "𝄞" * 40, "\\" * 101, "x" * 49, "é" * 26]
    for ascii_only in (True, False):
        raw = json.dumps({"traceEvents": [{"name": t} for t in texts]}, ensure_ascii=ascii_only).encode()
        stream = kineto_json._DepthBounded(io.BytesIO(raw))
        names = [e["name"] for e in ijson.items(stream, "traceEvents.item", buf_size=size)]
        assert len(names) == len(texts)
        assert all(t.startswith(n) and len(n.encode()) >= 8 for t, n in zip(texts, names, strict=True))
        assert names[3] == texts[3] and stream.cut == sum(n != t for t, n in zip(texts, names, strict=True)) >= 3
