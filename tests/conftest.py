"""Shared pytest fixtures.

Each block below is self-contained; add new fixtures as blocks of their own further down.
"""

# ------------------------------------------------------------------------------------------------
# CPU traces: real Nsight Systems captures of the programs in tests/fixtures/cpu/, made at test
# time by tests/fixtures/cpu/make_traces.sh (no GPU needed).
#
#   cpu_traces           -> Path of a folder holding
#                             nvtx_edge_cases.nsys-rep / nvtx_edge_cases.sqlite
#                             empty_capture.nsys-rep   / empty_capture.sqlite
#                             build/secrets_probe      (built, not captured: see tests/test_bundle.py)
#                           generated once, then cached in tests/.cache/cpu-traces/<key>/ (the key
#                           hashes the fixture sources and the nsys version, so edits regenerate).
#   cpu_traces_expected  -> dict loaded from tests/fixtures/cpu/expected.json, the hand-written
#                           description of what nvtx_edge_cases.c does.
#
# nsys is looked up as $NSYS, then PATH, then /opt/nsys-cpu/target-linux-x64/nsys, where
# scripts/setup-tests.sh installs it. If none is found the tests using cpu_traces are skipped,
# except when the CI environment variable is set (to anything but "", 0, false, no): then they
# fail, since CI must really run them. A failure of make_traces.sh itself always fails the tests.
# ------------------------------------------------------------------------------------------------
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from fixture_paths import CPU, GPU

_CPU_TRACES_CACHE = Path(__file__).resolve().parent / ".cache" / "cpu-traces"
_CPU_TRACE_SOURCES = ("make_traces.sh", "nvtx_edge_cases.c", "empty_capture.c", "secrets_probe.c")
_NSYS_DEFAULT = Path("/opt/nsys-cpu/target-linux-x64/nsys")


def _ci_is_set() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _find_nsys() -> str | None:
    candidates = [os.environ.get("NSYS"), shutil.which("nsys"), str(_NSYS_DEFAULT)]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _cpu_traces_key(nsys: str) -> str:
    h = hashlib.sha256()
    for name in _CPU_TRACE_SOURCES:
        h.update(name.encode() + b"\0" + (CPU / name).read_bytes() + b"\0")
    version = subprocess.run(
        [nsys, "--version"], capture_output=True, text=True, timeout=120
    ).stdout.strip()
    h.update(os.path.realpath(nsys).encode() + b"\0" + version.encode())
    return h.hexdigest()[:16]


@pytest.fixture(scope="session")
def cpu_traces() -> Path:
    nsys = _find_nsys()
    if nsys is None:
        msg = (
            "nsys not found: run scripts/setup-tests.sh (it installs one to "
            f"{_NSYS_DEFAULT}), set NSYS or put nsys on PATH (tests/fixtures/cpu/make_traces.sh needs it)"
        )
        if _ci_is_set():
            pytest.fail(msg + " -- CI is set, so the CPU trace tests must run", pytrace=False)
        pytest.skip(msg)

    dest = _CPU_TRACES_CACHE / _cpu_traces_key(nsys)
    if (dest / ".complete").is_file():
        return dest

    # generate into a private folder, then move it into place in one step, so that a crash
    # never leaves a half-made cache and parallel sessions do not trip over each other
    _CPU_TRACES_CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=_CPU_TRACES_CACHE))
    try:
        proc = subprocess.run(
            ["bash", str(CPU / "make_traces.sh"), str(tmp)],
            env={**os.environ, "NSYS": nsys},
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            pytest.fail(
                f"tests/fixtures/cpu/make_traces.sh failed (exit {proc.returncode}):\n"
                f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}",
                pytrace=False,
            )
        (tmp / ".complete").write_text(proc.stdout)
        if dest.exists() and not (dest / ".complete").is_file():
            shutil.rmtree(dest, ignore_errors=True)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / ".complete").is_file():  # not just another session finishing first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


@pytest.fixture(scope="session")
def cpu_traces_expected() -> dict:
    return json.loads((CPU / "expected.json").read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------------
# (other fixtures go below, each in a block of its own)
# ------------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------------
# GPU traces: real H200 captures shipped xz-compressed in tests/fixtures/gpu/ (see README.md
# there), each beside <name>.expected.json, what the workload itself counted it launched.
#
#   gpu_xz(name)         -> Path of tests/fixtures/gpu/<name>.sqlite.xz
#   gpu_expected(name)   -> dict loaded from <name>.expected.json
#   gpu_sqlite(name)     -> Path of a decompressed copy in a session temporary folder, for tests
#                           that need a plain .sqlite file (scrub, truncated copies); do not modify
#   gpu_trace(name)      -> gemmscope.traces.model.Trace of it, read once per session
#   gpu_launches(name)   -> a copy of attribution.launches() of it, computed once per session
#
# gemmscope is imported inside the fixtures, so collecting unrelated tests never depends on it.
# ------------------------------------------------------------------------------------------------


def _gpu_xz(name: str) -> Path:
    path = GPU / f"{name}.sqlite.xz"
    assert path.is_file(), f"no GPU fixture {path}"
    return path


@pytest.fixture(scope="session")
def gpu_xz():
    return _gpu_xz


@pytest.fixture(scope="session")
def gpu_expected():
    def load(name: str) -> dict:
        return json.loads((GPU / f"{name}.expected.json").read_text(encoding="utf-8"))

    return load


@pytest.fixture(scope="session")
def gpu_sqlite(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpu-sqlite")

    def path(name: str) -> Path:
        target = folder / f"{name}.sqlite"
        if not target.exists():
            target.write_bytes(lzma.decompress(_gpu_xz(name).read_bytes()))
        return target

    return path


@pytest.fixture(scope="session")
def gpu_trace():
    from gemmscope.traces.read import read_trace

    cache: dict = {}

    def load(name: str):
        if name not in cache:
            cache[name] = read_trace(_gpu_xz(name))
        return cache[name]

    return load


@pytest.fixture(scope="session")
def gpu_launches(gpu_trace):
    from gemmscope.assembly.attribution import launches

    cache: dict = {}

    def load(name: str):
        if name not in cache:
            cache[name] = launches(gpu_trace(name))
        return cache[name].copy()

    return load


# ------------------------------------------------------------------------------------------------
# nsys_bin -> path of the nsys that made cpu_traces, for tests that capture something of their
#             own (it depends on cpu_traces, so it skips, or fails under CI, exactly as that does)
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def nsys_bin(cpu_traces) -> str:
    return _find_nsys()


# ------------------------------------------------------------------------------------------------
# chromium_bin -> path of a Chromium (Debian's `chromium`, or $CHROMIUM) for the tests that open
#                 gemmscope's HTML report in a real headless browser. If none is found they are
#                 skipped, except when the CI environment variable is set (to anything but "", 0,
#                 false, no): then they fail, since CI must really run them (scripts/setup-tests.sh
#                 installs it).
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def chromium_bin() -> str:
    candidates = [os.environ.get("CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser")]
    found = next((c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)
    if found is None:
        msg = "chromium not found: run scripts/setup-tests.sh, set CHROMIUM or install it (apt-get install chromium)"
        if _ci_is_set():
            pytest.fail(msg + " -- CI is set, so the browser tests must run", pytrace=False)
        pytest.skip(msg)
    return found


# ------------------------------------------------------------------------------------------------
# torch_cpu -> the torch module, for the tests that run gemmscope's autocast hook on CPU tensors
#              (tests/test_autocast_hook.py). Without torch they are skipped, except when the CI
#              environment variable is set (to anything but "", 0, false, no): then they fail,
#              since CI must really run them (scripts/setup-tests.sh installs torch's CPU build).
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def torch_cpu():
    if not _ci_is_set():
        return pytest.importorskip("torch")
    try:
        import torch
    except ImportError as exc:
        pytest.fail(f"torch not importable ({exc}) -- CI is set, so the hook's tests must run", pytrace=False)
    return torch


# ------------------------------------------------------------------------------------------------
# megatron_core -> megatron.core, for the tests that load the per-module recipe file whatif writes
#                  with Megatron's own loader (its quantization and TE-extension modules import
#                  without a GPU or Transformer Engine). Without it they are skipped, except when the
#                  CI environment variable is set: then they fail (pip install -e '.[test]' installs it).
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def megatron_core():
    try:
        import megatron.core.extensions.transformer_engine
        import megatron.core.quantization.utils  # noqa: F401
    except ImportError as exc:
        msg = f"megatron-core not importable ({exc}): pip install -e '.[test]'"
        if _ci_is_set():
            pytest.fail(msg + " -- CI is set, so its loader's tests must run", pytrace=False)
        pytest.skip(msg)
    return megatron.core


# ------------------------------------------------------------------------------------------------
# Every pytest session decodes kernel names afresh. kernels.decode keeps what it decoded for the
# life of the process, and mutmut (tests/mutation/mutation.sh) runs each mutant's tests in a
# process forked from one that already ran them all: without this, a mutant of a name decoder
# would never be called for the names decoded before the fork, and would survive every test.
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session", autouse=True)
def _kernel_names_decoded_afresh():
    from gemmscope import kernels

    kernels.decode.cache_clear()


# ------------------------------------------------------------------------------------------------
# Under mutmut (tests/mutation/mutation.sh), a mutant's tests run test file by test file, the files
# quickest in mutmut's own timings first: it stops at the first failure, and most mutants fail a
# quick test. Each file's tests keep their order, so module fixtures are set up once.
# ------------------------------------------------------------------------------------------------
def pytest_collection_modifyitems(config, items):
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return
    timings = Path("mutmut-stats.json")  # mutmut runs the tests from its mutants/ folder
    if not timings.is_file():
        return
    seconds = json.loads(timings.read_text(encoding="utf-8"))["duration_by_test"]
    per_file: dict[str, float] = {}
    for item in items:
        per_file[item.fspath.strpath] = per_file.get(item.fspath.strpath, 0.0) + seconds.get(item.nodeid, 0.0)
    items.sort(key=lambda item: per_file[item.fspath.strpath])
