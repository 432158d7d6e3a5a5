"""Property test over the CLI: bad paths, truncated and damaged traces, secrets planted in a
real trace. Whatever comes in: no traceback, exit 0, 1 or 2 (2 with one line on stderr), no
output left half-written (nor at all after a failure), and no planted secret in what scrub writes."""

import functools
import lzma
import sqlite3
import string
from contextlib import closing
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemmscope.cli import main

from sqlite_text import all_text

SOURCE = Path(__file__).parent / "fixtures" / "gpu" / "te_linear_bf16.sqlite.xz"
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@functools.cache
def raw_trace() -> bytes:
    return lzma.decompress(SOURCE.read_bytes())


def _check_outcome(done, out: Path) -> None:
    assert done.exception is None or isinstance(done.exception, SystemExit), repr(done.exception)
    assert "Traceback" not in done.output
    assert done.exit_code in (0, 1, 2), done.output
    if done.exit_code == 2:
        assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("gemmscope: error: "), done.stderr
        assert not out.exists()
    assert not list(out.parent.glob("*.partial"))


names = st.one_of(st.just("missing.sqlite"), st.just("folder"), st.just("x" * 300 + ".sqlite"),
                  st.text(string.ascii_letters + " -_.é", min_size=1, max_size=40).map(lambda s: s + ".sqlite"),
                  st.just("a.nsys-rep"), st.just("notes.sqlite.xz"))


@SETTINGS
@given(command=st.sampled_from(["analyze", "scrub", "report", "bundle"]), name=names,
       cut=st.one_of(st.none(), st.integers(min_value=0, max_value=200_000)), compress=st.booleans())
def test_bad_inputs_are_one_line(tmp_path_factory, command, name, cut, compress):
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "folder").mkdir()
    target = folder / name
    if name not in ("missing.sqlite", "folder") and len(name) < 255:
        data = raw_trace() if cut is None else raw_trace()[:cut]
        target.write_bytes(lzma.compress(data) if compress and name.endswith(".xz") else data)
    out = folder / "out" / ("shared.sqlite" if command == "scrub" else "issue.zip" if command == "bundle" else "r.md")
    out.parent.mkdir()
    args = [command, str(target)] + ([] if command == "analyze" else ["-o", str(out)])
    _check_outcome(CliRunner().invoke(main, args), out)


SECRETS = st.sampled_from([
    lambda r: "hf_" + r * 3, lambda r: "ghp_" + r * 3, lambda r: "AKIA" + (r + r)[:16].upper(), lambda r: "sk-ant-" + r * 2,
    lambda r: f"{r[:8]}@example-corp.com", lambda r: f"node-{r[:8]}.corp.example.com", lambda r: f"--password={r}",
    lambda r: f"/home/{r[:8]}/ckpt", lambda r: f"WANDB_API_KEY={r}", lambda r: "xoxb-" + r * 2,
])


# "zq" and six distinct characters: a random part no real trace holds by chance (not "00000000")
RANDOM_PARTS = st.text(string.ascii_lowercase + string.digits, min_size=10, max_size=10).filter(
    lambda s: len(set(s)) >= 6).map(lambda s: "zq" + s)


@SETTINGS
@given(make=SECRETS, random_part=RANDOM_PARTS,
       where=st.sampled_from(["StringIds", "NVTX_EVENTS"]))
def test_planted_secret_never_survives_scrub(tmp_path_factory, make, random_part, where):
    folder = tmp_path_factory.mktemp("plant")
    trace = folder / "t.sqlite"
    trace.write_bytes(raw_trace())
    secret = make(random_part)
    with closing(sqlite3.connect(trace)) as conn:
        if where == "StringIds":
            conn.execute("INSERT INTO StringIds (id, value) SELECT max(id) + 1, ? FROM StringIds", (f"out {secret}\n",))
        else:
            conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                         "VALUES (1, NULL, 34, ?, 0, 0)", (f"step {secret}",))
        conn.commit()
    out = folder / "shared.sqlite"
    done = CliRunner().invoke(main, ["scrub", str(trace), "-o", str(out)])
    _check_outcome(done, out)
    assert done.exit_code == 0
    text = "\n".join(all_text(out))
    # every secret carries at least the first 8 random characters, as written or upper-cased
    assert random_part[:8] not in text and random_part[:8].upper() not in text, secret
    assert "gemmscope: redacted: " in done.stderr and random_part[:8] not in done.output
