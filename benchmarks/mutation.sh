#!/bin/bash
# Mutation testing of the rules gemmscope's verdicts rest on (not part of CI: hours on two cores,
# where mutants whose tests read real traces run at 5-8 a minute). mutmut (pip install 'gemmscope[mutation]') changes one thing at a time in the
# functions named below and runs the tests that cover each one ([tool.mutmut] in pyproject.toml);
# a mutant no test kills is a survivor. Writes benchmarks/mutation-report.txt: date, commit, counts
# per function, and every survivor with its diff. Arguments replace the default function patterns.
#
#   bash benchmarks/mutation.sh                                   # the default functions below
#   bash benchmarks/mutation.sh 'gemmscope.scrub.*'               # one whole module
#   bash benchmarks/mutation.sh --survivors                       # the last run's survivors again, with
#                                                                 # the tests as they are now
#   bash benchmarks/mutation.sh --survivors 'gemmscope.kernels.*' # those of some functions only
#   bash benchmarks/mutation.sh --survivors none                  # the report only, written anew
#   bash benchmarks/mutation.sh --resume                          # an interrupted run on: the mutants
#                                                                 # of the default functions not run yet
#   MUTATION_CHILDREN=4 bash benchmarks/mutation.sh               # mutants run 4 at a time (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
survivors_only=false
resume=false
if [ "${1:-}" = --survivors ]; then
  survivors_only=true
  shift
  again_patterns=("${@:-*}")  # which survivors to run again; the report covers the default functions
  set --
elif [ "${1:-}" = --resume ]; then
  resume=true
  shift
fi
export NSYS=${NSYS:-/opt/nsys-cpu/target-linux-x64/nsys}
functions=("$@")
if [ ${#functions[@]} -eq 0 ]; then
  functions=(
    # attribution, all of it: which NVTX ranges enclose a launch, their nesting, the innermost one
    # a pattern names (--expect-map, --allow), each process's rank, the launches frame and what
    # the ranges say of each launch (module, name, pass and its source, shapes)
    'gemmscope.attribution.*'
    # verify: a trace's rank (mark, GPU, file name), what a run asked for, the verdict, cause and
    # --allow per GEMM, the per-module summary and the rank comparison
    'gemmscope.verify.x__fill_ranks__*' 'gemmscope.verify.x__rank_in_name__*' 'gemmscope.verify.x__rank_by_gpu__*'
    'gemmscope.verify.x_recorded_recipes__*' 'gemmscope.verify.x_resolve_expected__*'
    'gemmscope.verify.x_verdict__*' 'gemmscope.verify.x__judge__*' 'gemmscope.verify.x__causes__*'
    'gemmscope.verify.x_allowed__*' 'gemmscope.verify.x_launched_by_te__*'
    'gemmscope.verify.x_summarize__*' 'gemmscope.verify.x_compare_ranks__*'
    # kernels: how a name's operand types and scales make a precision, per naming scheme, and its arch
    'gemmscope.kernels.x__precision__*' 'gemmscope.kernels.x__scale_mode__*' 'gemmscope.kernels.x__nvjet_operands__*'
    'gemmscope.kernels.x__xmma_operands__*' 'gemmscope.kernels.x__cublas_legacy_operands__*'
    'gemmscope.kernels.x__cutlass2_operands__*' 'gemmscope.kernels.x__cutlass3_operand__*'
    'gemmscope.kernels.x__cutlass3_operands__*' 'gemmscope.kernels.x__cute_atom_operands__*'
    'gemmscope.kernels.x__template_operands__*' 'gemmscope.kernels.x__arch__*'
    'gemmscope.kernels.x_is_autotune_candidate__*'
    # scrub: what the redactor takes out, and what it learns from a trace's records
    'gemmscope.scrub.xǁRedactorǁ__init____*' 'gemmscope.scrub.xǁRedactorǁ__call____*'
    'gemmscope.scrub.xǁRedactorǁ_replace__*' 'gemmscope.scrub.xǁRedactorǁof_exports__*'
    'gemmscope.scrub.x__alternation__*'
  )
fi
stamp() {
  echo "on $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- gemmscope tests || echo ' + uncommitted changes')"
}
matching() {  # the names read on stdin that one of the shell patterns given matches
  while read -r name; do
    for pattern in "$@"; do
      # shellcheck disable=SC2053
      if [[ $name == $pattern ]]; then echo "$name"; break; fi
    done
  done
}
survivors() {
  mutmut results | awk -F: '/survived|no tests/ {print $1}' | matching "${functions[@]}"
}
if $survivors_only; then
  # mutmut copies the tests afresh and maps the new ones to the functions they call; with no
  # survivor to run again the report is only written anew
  mapfile -t again < <(survivors | matching "${again_patterns[@]}")
  if [ ${#again[@]} -gt 0 ]; then
    started=$(stamp)  # mutmut copies the tests when it starts
    mutmut run --max-children "${MUTATION_CHILDREN:-1}" "${again[@]}"
    echo "survivors re-run $started" >> mutants/runs.txt
  fi
elif $resume; then
  # mutmut runs every mutant named to it again, so the ones not run yet are named one by one
  mapfile -t pending < <(mutmut results --all true | awk -F': ' '$2 == "not checked" {print $1}' \
    | matching "${functions[@]}")
  if [ ${#pending[@]} -gt 0 ]; then
    started=$(stamp)
    mutmut run --max-children "${MUTATION_CHILDREN:-1}" "${pending[@]}"
    echo "resumed $started: ${#pending[@]} mutants not run before" >> mutants/runs.txt
  fi
else
  rm -rf mutants  # mutmut keeps results per mutant: a full run starts from none
  started=$(stamp)
  mutmut run --max-children "${MUTATION_CHILDREN:-1}" "${functions[@]}"
  echo "full run $started" > mutants/runs.txt
fi
report=benchmarks/mutation-report.txt
{
  echo "mutmut $(mutmut --version 2>/dev/null | awk '{print $NF}'):"
  cat mutants/runs.txt
  echo
  echo "mutants per function (killed / all; survivors listed below):"
  mutmut results --all true | python3 -c '
import collections, fnmatch, sys
patterns = sys.argv[1:]
counts = collections.defaultdict(lambda: [0, 0, 0])  # killed, all, not run
for line in sys.stdin:
    name, _, status = line.strip().partition(": ")
    if not any(fnmatch.fnmatch(name, p) for p in patterns):
        continue
    function = name.split("__mutmut_")[0]
    counts[function][0] += status in ("killed", "timeout", "segfault", "caught by type check")
    counts[function][1] += 1
    counts[function][2] += status == "not checked"
def line(label, killed, total, not_run):
    print(f"  {label}: {killed} / {total}" + (f" ({not_run} not run)" if not_run else ""))
for function, numbers in sorted(counts.items()):
    line(function, *numbers)
line("all", *(sum(column) for column in zip(*counts.values())))
' "${functions[@]}"
  echo
  echo "survivors (benchmarks/mutation-survivors.md says why each kind is left):"
  for name in $(survivors); do
    echo "== $name"
    mutmut show "$name" | sed -n '2,$p'
  done
} > "$report"
echo "$report"
