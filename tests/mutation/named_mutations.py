"""The small mistakes issue 22 found the tests blind to, each made in a copy of the source tree:
every one must fail a test. mutmut (tests/mutation/mutation.sh) mutates inside functions only, and
not inside decorated ones, so the pattern tables (kernels.RULES, redaction.RULES, redaction.SECRET_NAME),
the cached `kernels.decode` and `Judgement`'s properties (what fails a check) are checked here.

    python tests/mutation/named_mutations.py        # one line per mutation: KILLED or SURVIVED; exit 1 on a survivor
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# (what the mistake is, file, text, replacement, tests that must catch it)
MUTATIONS = (
    ("a push/pop range starting at the launch no longer contains it", "gemmscope/assembly/attribution.py",
     "(r_start[ids[np.maximum(at, 0)]] <= lo)", "(r_start[ids[np.maximum(at, 0)]] < lo)", "tests/test_attribution.py"),
    ("'still open' tested against the launch's start", "gemmscope/assembly/attribution.py",
     "(r_end[ids[np.maximum(at, 0)]] < hi)", "(r_end[ids[np.maximum(at, 0)]] < lo)", "tests/test_attribution.py"),
    ("start/end ranges not checked against the launch's end", "gemmscope/assembly/attribution.py",
     "inside = inside[t1[inside] <= r_end[row]]", "pass", "tests/test_attribution.py"),
    ("start/end ranges of one process applied to another's launches", "gemmscope/assembly/attribution.py",
     "mine = order[launch_pid[order] == pid]", "mine = order", "tests/test_attribution.py"),
    ("push/pop stacks of all domains of a thread as one", "gemmscope/assembly/attribution.py",
     'push_pop.groupby(["global_tid", push_pop["domain"].fillna("")], sort=False)',
     'push_pop.groupby(["global_tid", push_pop["global_tid"]], sort=False)', "tests/test_attribution.py"),
    ("the rank in a per-rank file's name ignored", "gemmscope/assembly/job.py",
     "fallback = named if named is not None else", "fallback = None if named is not None else",
     "tests/test_attribution.py"),
    ("GEMM tail time forced to 0", "gemmscope/assembly/job.py",
     'tails_ns = int(all_kernels.loc[all_kernels["role"] == "gemm-tail", "duration_ns"].sum())', "tails_ns = 0",
     "tests/test_verify.py tests/test_attribution.py"),
    ("temporary AWS key ids (ASIA…) not redacted", "gemmscope/redaction/policy.py", "(?:AKIA|ASIA)", "(?:AKIA)",
     "tests/test_patterns.py"),
    ("GitHub ghs_/ghu_/ghr_ tokens not redacted", "gemmscope/redaction/policy.py",
     "gh[pousr]_", "gh[po]_", "tests/test_patterns.py"),
    ("PASSWD-style names not secret", "gemmscope/redaction/policy.py",
     "|PASSWORD|PASSWD)", "|PASSWORD)", "tests/test_patterns.py"),
    ("Inductor's GEMM template rule narrowed to *bmm", "gemmscope/kernels/rules.py",
     r'triton_tem_fused_\w*mm"', r'triton_tem_fused_\w*bmm"', "tests/test_kernel_rules.py"),
    ("a GEMM rule without an operand reader read as no GEMM", "gemmscope/kernels/match.py",
     "        operands = UNKNOWN_OPERANDS\n    else:", "        operands = NOT_A_GEMM\n    else:",
     "tests/test_kernels.py tests/test_kernel_rules.py"),
    ("a kernel's architecture not read from its name", "gemmscope/kernels/match.py", "arch=_arch(text),", "arch=None,",
     "tests/test_kernels.py tests/test_kernel_rules.py"),
    ("a kernel's family taken from its rule's id", "gemmscope/kernels/match.py", "family=rule.family,", "family=rule.id,",
     "tests/test_kernels.py tests/test_kernel_rules.py"),
    ("a trace that could not be read no longer fails the check", "gemmscope/judging/judgement.py",
     " or ranges_failed or bool(self.unreadable)", " or ranges_failed", "tests/test_verify.py tests/test_loading.py"),
    ("a recipe asked for and no GEMM run passes", "gemmscope/judging/judgement.py",
     "return len(self.mismatches) > 0 or nothing_ran or", "return len(self.mismatches) > 0 or",
     "tests/test_verify.py tests/test_attribution.py"),
    ("a failed --expect-map range passes", "gemmscope/judging/judgement.py",
     "or nothing_ran or ranges_failed or", "or nothing_ran or", "tests/test_attribution.py tests/test_corpus.py"),
    ("allowed fallbacks counted as mismatches", "gemmscope/judging/judgement.py",
     '(self.gemms["verdict"] == "FALLBACK") & ~self.gemms["allowed"]]', '(self.gemms["verdict"] == "FALLBACK")]',
     "tests/test_verify.py"),
    ("no GEMM asked for high precision listed as coverage", "gemmscope/judging/judgement.py",
     'return self.gemms[self.gemms["asked_high"]]', "return self.gemms.iloc[0:0]",
     "tests/test_verify.py tests/test_frameworks.py tests/test_corpus.py"),
    ("a run made with the hook read as one without it", "gemmscope/judging/judgement.py",
     "return any(name.startswith(prefixes) for t in self.traces", "return False and any(name.startswith(prefixes) for t in self.traces",
     "tests/test_verify.py tests/test_attribution.py tests/test_frameworks.py tests/test_cli.py"),
    ("the run's recipe named before the mapped ones", "gemmscope/judging/judgement.py",
     "[r for _, r in self.expect_map] + ([self.expected] if self.expected else [])",
     "([self.expected] if self.expected else []) + [r for _, r in self.expect_map]", "tests/test_verify.py"),
)


def main() -> int:
    survivors = 0
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder) / "tree"
        for what, path, text, replacement, tests in MUTATIONS:
            shutil.rmtree(tree, ignore_errors=True)
            shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(".git", "mutants", "__pycache__"))
            source = (tree / path).read_text()
            assert source.count(text) == 1, f"{path} no longer holds {text!r} once: update {Path(__file__).name}"
            (tree / path).write_text(source.replace(text, replacement))
            run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests.split()],
                                 cwd=tree, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree)})
            survivors += run.returncode == 0
            print(f"{'SURVIVED' if run.returncode == 0 else 'KILLED  '} {what}: {run.stdout.strip().splitlines()[-1]}",
                  flush=True)
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
