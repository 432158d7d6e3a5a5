"""Redaction that fails closed: secrets outside the token shapes a rule knows are taken out by their
context (a key, variable or option that names a secret, an Authorization header), user@host,
country-code host names, per-user paths, Windows shares and user names glued into others are
taken out by their shape or by what the trace recorded; what no rule can read (BLOBs, text that
is no UTF-8) is replaced whole, never copied; a copy scrub cannot make safe is refused; and error
lines pass the same redaction. Secrets are generated from the shapes of public secret scanners'
rules (tests/planted_secrets.py) in the forms programs print them, into real traces."""

from __future__ import annotations

import base64
import lzma
import shutil
import sqlite3
import string
import zipfile
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gemmscope.errors import InputError
from gemmscope.redaction.policy import REDACTED, Redactor
from gemmscope.redaction.scrub import recorded_redactor, scrub
from gemmscope.traces.read import read_trace

from cli_runner import assert_one_line_error, gemmscope
from fixture_paths import GPU
from planted_secrets import KEY_PREFIXES, KEY_WORDS, PASSWORD, PREFIXED_WORDS, SHAPES

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
# What a program prints around a secret: nothing, or words of a training log.
PADDING = st.sampled_from(["", "rank 0: ", "step 17 loss 2.31 ", "[W init] ", "\n", "x "])


def _part(part) -> st.SearchStrategy[str]:
    if isinstance(part, str):
        return st.just(part)
    alphabet, shortest, longest = part
    return st.text(st.sampled_from(alphabet), min_size=shortest, max_size=longest)


def secrets_of(shape: tuple) -> st.SearchStrategy[str]:
    return st.tuples(*map(_part, shape)).map("".join)


SECRETS = st.sampled_from(sorted(SHAPES)).flatmap(lambda name: secrets_of(SHAPES[name]))


@st.composite
def secret_names(draw) -> tuple[str, str, str]:
    """One secret's name as an environment variable, an option and a key (HF_TOKEN, --hf-token,
    hf_token): a key word, alone or after a prefix; "pass" and "pwd" only after one (DB_PASS)."""
    prefix = draw(st.sampled_from(KEY_PREFIXES))
    word = draw(st.sampled_from(KEY_WORDS + PREFIXED_WORDS * bool(prefix)))
    words = [w for w in (prefix, word) if w]
    key = "_".join(words)
    if word not in PREFIXED_WORDS and draw(st.booleans()):  # camelCase, as JSON writes keys (apiKey, clientSecret)
        key = words[0] + "".join(w.title().replace("_", "") for w in words[1:])
    return "_".join(words).upper(), "--" + "-".join(words).replace("_", "-"), key


# The forms a secret is given in (the generic rules' contexts): {env}, {option}, {key}, {value}
FORMS = ("{env}={value}", "export {env}={value}", '{env}="{value}"', "{env}='{value}'", "--x 1 {option} {value}",
         "{option}={value}", "{key}: {value}", '"{key}": "{value}"', "'{key}': '{value}'", "{key} = {value}",
         "{key} => {value}", "{key}:={value}", "{env}: {value}", "  {key}: {value}\n  next: 1",
         '{{"{key}":"{value}","steps":3}}', "{key}: \"{value}")


@SETTINGS
@given(PADDING, st.sampled_from(FORMS), secret_names(), SECRETS, PADDING)
def test_a_secret_given_to_a_name_that_says_secret_goes_whatever_its_shape(before, form, names, value, after):
    """Every form of assignment, option and key/value, every shape of secret (and none: a
    password): the value goes, the name stays."""
    env, option, key = names
    text = before + form.format(env=env, option=option, key=key, value=value) + after
    assume(value not in (before + form.format(env=env, option=option, key=key, value="") + after))
    redacted = Redactor()(text)
    assert value not in redacted and REDACTED in redacted, redacted
    assert (key if "{key}" in form else env if "{env}" in form else option) in redacted


# The shapes a token is known by alone (a prefix its issuer documents); the others (an AWS secret
# key, a wandb key, a password) only by a name that says secret, or by the trace's records
PREFIXED = sorted(name for name, shape in SHAPES.items() if isinstance(shape[0], str))


@SETTINGS
@given(PADDING, st.sampled_from(PREFIXED).flatmap(lambda name: secrets_of(SHAPES[name])),
       st.sampled_from([" ", ": ", "\n", " (", "'"]), PADDING)
def test_a_token_of_a_documented_shape_goes_alone(before, token, separator, after):
    redacted = Redactor()(f"{before}using{separator}{token}{separator.strip('(')} {after}")
    assert token not in redacted and REDACTED in redacted, redacted


@SETTINGS
@given(PADDING, st.sampled_from(["Authorization", "authorization", "Proxy-Authorization", '"Authorization"']),
       st.sampled_from([": ", ":", "="]), st.text(st.sampled_from(string.ascii_lowercase), min_size=1, max_size=12),
       st.text(st.sampled_from(PASSWORD), min_size=1, max_size=40), st.sampled_from(["Basic", "basic", "Bearer", ""]),
       SECRETS, PADDING)
def test_authorization_headers_and_basic_credentials_go_whole(before, header, separator, user, password, scheme,
                                                              token, after):
    """An Authorization header's credentials, whatever the scheme (Basic: base64 of user:password)."""
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    credential = basic if scheme.lower() == "basic" else token
    for text in (f"{before}{header}{separator}{scheme} {credential}{after}".replace(" " * 2, " "),
                 f"{before}curl -H '{header}{separator}{scheme} {credential}' https://x{after}"):
        assume(credential not in text.replace(credential, "", 1))
        redacted = Redactor()(text)
        assert credential not in redacted, redacted


USER = st.from_regex(r"\A[a-z_][a-z0-9_.-]{2,14}\Z")
LABEL = st.from_regex(r"\A[a-z][a-z0-9-]{1,12}[a-z0-9]\Z")
# countries' domains HPC centres and clouds serve from, chosen here (not the policy's list)
COUNTRIES = ("ch", "it", "se", "no", "fi", "es", "dk", "be", "at", "cz", "sg", "tw", "il", "ca", "us", "ie", "nz",
             "za", "hk", "ro", "si", "hu", "gr", "ar", "cl", "mx", "in.ac", "pl.edu")


@SETTINGS
@given(PADDING, USER, st.lists(LABEL, min_size=1, max_size=3),
       st.from_regex(r"\A(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]"
                     r"|[1-9]?[0-9])){3}\Z"), st.booleans(), st.sampled_from(["", ":~/run", ":/data/x", " ls"]),
       PADDING)
def test_user_at_host_goes_whole(before, user, labels, address, by_address, path, after):
    host = address if by_address else ".".join(labels)
    assume(not host.startswith("v") or not host[1:2].isdigit())
    text = f"{before}ssh {user}@{host}{path}{after}"
    assume(user not in f"{before}ssh @{host}{path}{after}" and host not in f"{before}ssh {user}@{path}{after}")
    redacted = Redactor()(text)
    assert f"{user}@" not in redacted and f"@{host}" not in redacted, redacted


@SETTINGS
@given(PADDING, st.lists(LABEL, min_size=2, max_size=4), st.sampled_from(COUNTRIES), PADDING)
def test_country_code_host_names_go(before, labels, country, after):
    host = ".".join([*labels, *reversed(country.split("."))])
    redacted = Redactor()(f"{before}connecting to {host}:29500{after}")
    assert host not in redacted and f"to {REDACTED}:29500" in redacted, redacted


PER_USER_ROOTS = ("/home", "/Users", "/scratch", "/scratch1", "/gpfs/scratch", "/p/scratch/users", "/lustre/fs1/users",
                  "/global/homes/j", "/cscratch1/sd", "/fsx/users", "C:\\Users", "C:/Users", "D:\\\\Users")


@SETTINGS
@given(PADDING, st.sampled_from(PER_USER_ROOTS), USER, st.sampled_from(["", "/run3/ckpt.pt", "\\proj\\x.py", ":12"]),
       PADDING)
def test_per_user_paths_lose_the_user(before, root, user, tail, after):
    assume(user not in ("user", "users", "sd"))  # the folders between a root and its users' folders
    separator = "\\" if "\\" in root else "/"
    text = f"{before}saving to {root}{separator}{user}{tail}{after}"
    assume(user not in f"{before}saving to {root}{separator}{tail}{after}")
    redacted = Redactor()(text)
    assert user not in redacted, redacted


SHARE_NAME = st.from_regex(r"\A[A-Za-z][A-Za-z0-9_$-]{2,14}\Z")


@SETTINGS
@given(PADDING, SHARE_NAME, SHARE_NAME, st.sampled_from(["\\", "\\\\", "/"]), PADDING)
def test_windows_shares_lose_their_server_and_share(before, server, share, separator, after):
    text = f"{before}open {separator * 2}{server}{separator}{share}{separator}ckpt.pt{after}"
    assume(server not in text.replace(server, "", 1) and share not in text.replace(share, "", 1))
    redacted = Redactor()(text)
    assert server not in redacted and share not in redacted, redacted
    assert redacted.endswith(f"ckpt.pt{after}")


@pytest.mark.parametrize("text", [
    "sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x"
    "_cublas",
    "transformer_engine._Linear.forward.gemm", "decoder.layers.3.mlp.linear_fc1", "model.layers.12.self_attn.q_proj",
    "gemmscope.te_gemm|entry=general_gemm|module=Linear|name=attn.key_proj|layer=0.attn.key|pass=fprop",
    "PyCodeCache.load_by_key_path_data: compile_id=0/3", "aten::mm, sizes = [[4096, 4096], [4096, 4096]], dtype=bf16",
    "torch.sparse.mm torch.Tensor.to config.h.in model.final.pt Makefile.am", "torch@2.5 and repo@v1.2",
    "basic blocks", "/usr/share/doc /opt/scratchpad/x https://pytorch.org/docs", "cutlass::gemm::kernel::Key: 3",
    "[4096, 4096] float8_e4m3fn bfloat16 (2, 3)",
])
def test_what_gemmscope_reads_survives(text):
    assert Redactor()(text) == text


# --- what a trace records names its user ----------------------------------------------------------


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    """A real H200 export (scrubbed when committed), decompressed; never changed: tests copy it."""
    path = tmp_path_factory.mktemp("export") / "te_linear_bf16.sqlite"
    path.write_bytes(lzma.decompress((GPU / "te_linear_bf16.sqlite.xz").read_bytes()))
    return path


@pytest.fixture(scope="module")
def export_copy(export, tmp_path_factory) -> Path:
    """A copy of `export` that a test writes what nsys records into."""
    return Path(shutil.copyfile(export, tmp_path_factory.mktemp("records") / export.name))


def _copy(export: Path, folder: Path) -> Path:
    return Path(shutil.copyfile(export, folder / "run.sqlite"))


def _record(path: Path, rows: list[tuple[str, str]]) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.executemany("DELETE FROM META_DATA_CAPTURE WHERE name = ?", [(name,) for name, _ in rows])
        conn.executemany("INSERT INTO META_DATA_CAPTURE (name, value) VALUES (?, ?)", rows)
        conn.commit()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.from_regex(r"\A[a-z][a-z0-9]{2,10}\Z"), st.sampled_from(["/home/{u}/proj", "/scratch/{u}/runs/7",
                                                                    "/gpfs/scratch/users/{u}/x"]),
       st.booleans(), st.sampled_from(["{u}_run3", "ckpt_{u}_step100", "{u}-exp", "logs/{u}.txt"]))
def test_a_user_the_working_directory_or_home_names_goes_where_glued(export_copy, user, folder, as_home, glued):
    """The recorded working directory (or HOME in the recorded environment) says whose folder the
    run used: that name goes wherever it stands, glued into another with `_` too; not inside a
    word (malice)."""
    assume(user not in "saved at step 3")
    directory = folder.format(u=user)
    _record(export_copy, [("PROCESS_0:WORKING_DIR", "/opt/run" if as_home else directory),
                          ("PROCESS_0:ENVIRONMENT_VARIABLE", f'HOME="{directory}"' if as_home else "LANG=C")])
    redact = recorded_redactor([export_copy])
    name = glued.format(u=user)
    assert user not in redact(f"saved {name} at step 3"), name
    assert redact(f"x{user}y") == f"x{user}y"


def test_a_secret_option_recorded_in_any_form_is_redacted_in_environment_json(export, tmp_path):
    """The bundle's environment.json holds the command line, redacted: --db-pass VALUE (a secret
    named by a word of its option's name) goes there and wherever the program printed it."""
    from gemmscope.api import bundle

    trace = _copy(export, tmp_path)
    password = "Pw" + "".join(reversed(string.ascii_letters[:14]))
    _record(trace, [("PROCESS_0:ARGUMENT_7", "--db-pass"), ("PROCESS_0:ARGUMENT_8", password),
                    ("PROCESS_0:ARGUMENT_9", f"db_password: {password}x")])
    with closing(sqlite3.connect(trace)) as conn:
        conn.execute("INSERT INTO StringIds (id, value) SELECT max(id) + 1, ? FROM StringIds", (f"using {password}",))
        conn.commit()
    made = bundle([trace], tmp_path / "issue.zip")
    with zipfile.ZipFile(made.path) as zipped:
        members = {name: zipped.read(name) for name in zipped.namelist()}
    for name, data in members.items():
        data = lzma.decompress(data) if name.endswith(".xz") else data
        assert password.encode() not in data, name
    assert b"--db-pass [redacted]" in members["environment.json"]


# --- what no rule can read --------------------------------------------------------------------------


def _plant_unreadable(path: Path, secret: str, payload: bytes) -> None:
    """`secret` where no text rule can read it: NVTX events' binary payloads (BLOBs, as nsys stores
    them) and a JSON payload stored as a BLOB, a text that is no UTF-8 among the strings and an
    NVTX name that is no UTF-8."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE NVTX_EVENTS SET binaryData = ? WHERE rowid IN (SELECT rowid FROM NVTX_EVENTS LIMIT 3)",
                     (payload + secret.encode() + payload,))
        conn.execute("UPDATE NVTX_EVENTS SET jsonText = ? WHERE rowid = (SELECT max(rowid) FROM NVTX_EVENTS)",
                     (b"blob " + secret.encode(),))
        conn.execute("INSERT INTO StringIds (id, value) SELECT max(id) + 1, CAST(? AS TEXT) FROM StringIds",
                     (secret.encode() + b" \xff\xfe",))
        conn.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                     "SELECT min(start), max(end), 59, CAST(? AS TEXT), globalTid, 0 FROM NVTX_EVENTS "
                     "GROUP BY globalTid LIMIT 1", (b"\xc3(" + secret.encode(),))
        conn.commit()


def _every_value(path: Path) -> bytes:
    """Every value of every table as bytes (BLOBs and text that is no UTF-8 included), and the file."""
    values = [path.read_bytes()]
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            for column in [c[1] for c in conn.execute(f'PRAGMA table_info("{table}")')]:
                values += [v for (v,) in conn.execute(f'SELECT CAST("{column}" AS BLOB) FROM "{table}"') if v]
    return b"\n".join(values)


@pytest.fixture(scope="module")
def export_values(export) -> bytes:
    return _every_value(export)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(SECRETS, st.binary(max_size=64))
def test_blobs_and_undecodable_text_are_replaced_whole(export, export_values, tmp_path_factory, secret, payload):
    """A secret of any shape (or none) in a BLOB or in text that is no UTF-8 leaves no byte of
    it in the scrubbed copy; each is counted by kind; what gemmscope reads is as it was."""
    assume(len(secret) >= 8 and secret.encode() not in export_values)
    folder = tmp_path_factory.mktemp("unreadable")
    trace = _copy(export, folder)
    _plant_unreadable(trace, secret, payload)
    assert secret.encode() in _every_value(trace)
    redactor = recorded_redactor([trace])
    out = scrub(trace, folder / "shared.sqlite", redactor)
    assert secret.encode() not in _every_value(out)
    assert redactor.counts["blob"] == 4 and redactor.counts["undecodable-text"] == 2, redactor.counts
    before, after = read_trace(export), read_trace(out)
    for frame in ("kernels", "api_calls", "gpus"):
        assert getattr(before, frame).equals(getattr(after, frame)), frame


def test_scrub_says_what_it_removed_by_kind(export, tmp_path):
    trace = _copy(export, tmp_path)
    _plant_unreadable(trace, "hunter2-" + "q" * 12, b"\x00\x01")
    done = gemmscope("scrub", trace, "-o", tmp_path / "shared.sqlite")
    assert done.returncode == 0, done.stderr
    assert "gemmscope: redacted: 4 blob, 2 undecodable-text" in done.stderr.splitlines(), done.stderr


@pytest.mark.parametrize("definition", [
    "CREATE VIEW notes AS SELECT 'ghp_{token}' AS v",
    "CREATE TABLE \"run by alice@login01\" (x)",
    "CREATE TABLE extra (x TEXT DEFAULT 'password: {token}')",
])
def test_a_copy_scrub_cannot_make_safe_is_refused_and_nothing_written(export, tmp_path, definition):
    """What the redaction would take out, in the schema (a view's or a default's text, a table's
    name), is not a value scrub can rewrite: no shareable copy, one line, exit 2."""
    trace = _copy(export, tmp_path)
    token = "A1b2" * 9
    with closing(sqlite3.connect(trace)) as conn:
        conn.execute(definition.format(token=token))
        conn.commit()
    with pytest.raises(InputError, match="scrub cannot make .* safe to share"):
        scrub(trace, tmp_path / "shared.sqlite")
    done = gemmscope("scrub", trace, "-o", tmp_path / "shared.sqlite")
    assert_one_line_error(done)
    assert token not in done.stderr and "alice" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.sqlite"]


def test_a_trigger_cannot_copy_what_scrub_redacts(export, tmp_path):
    trace = _copy(export, tmp_path)
    secret = "ghp_" + "Zq9" * 12
    with closing(sqlite3.connect(trace)) as conn:
        # a table scrub redacts before StringIds, where the trigger would copy StringIds' old values
        conn.execute("CREATE TABLE Archive (value)")
        conn.execute("CREATE TRIGGER keep AFTER UPDATE ON StringIds BEGIN INSERT INTO Archive VALUES (old.value); END")
        conn.execute("INSERT INTO StringIds (id, value) SELECT max(id) + 1, ? FROM StringIds", (f"token {secret}",))
        conn.commit()
    out = scrub(trace, tmp_path / "shared.sqlite")
    assert secret.encode() not in _every_value(out)


@pytest.mark.parametrize("command", ["scrub", "report", "bundle"])
@pytest.mark.parametrize("stored", ["text that is no UTF-8", "a BLOB"])
def test_error_lines_pass_the_redaction(export, tmp_path, command, stored):
    """A trace that holds, among its strings, text that is no UTF-8 or a BLOB (which nsys never
    writes) is refused in one line that says where, never what it held (SQLite quotes
    undecodable text, Python a BLOB), nor a token or a password in it."""
    trace = _copy(export, tmp_path)
    token, password = "hf_" + "Xy7" * 11, "pw-" + "k3" * 8
    value = f"{token} {password} ".encode() + b"\xff"
    with closing(sqlite3.connect(trace)) as conn:
        conn.execute("UPDATE StringIds SET value = CAST(? AS TEXT) WHERE id = (SELECT max(id) FROM StringIds)"
                     if stored.startswith("text") else
                     "UPDATE StringIds SET value = ? WHERE id = (SELECT max(id) FROM StringIds)", (value,))
        conn.commit()
    done = gemmscope(command, trace, "-o", tmp_path / ("out.zip" if command == "bundle" else "out.sqlite"))
    if done.returncode == 0:  # scrub and report read the strings as bytes, and redact them whole
        assert command in ("scrub", "report") and stored.startswith("text"), done.stderr
        assert "1 undecodable-text" in done.stderr
    else:
        assert_one_line_error(done)
    assert token not in done.stderr and password not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) in (["run.sqlite"], ["out.sqlite", "run.sqlite"])
