#!/bin/bash
# Mutation testing of the rules gemmscope's verdicts rest on (not part of CI: hours on two cores,
# where mutants whose tests read real traces run at 5-8 a minute). mutmut (pip install 'gemmscope[mutation]') changes one thing at a time in the
# functions named below and runs the tests that cover each one ([tool.mutmut] in pyproject.toml);
# a mutant no test kills is a survivor. Writes docs/mutation-report.txt: date, commit, counts
# per function, and every survivor with its diff. Arguments replace the default function patterns.
#
#   bash tests/mutation/mutation.sh                                   # the default functions below
#   bash tests/mutation/mutation.sh 'gemmscope.redaction.scrub.*'   # one whole module
#   bash tests/mutation/mutation.sh --survivors                       # the last run's survivors again, with
#                                                                       # the tests as they are now
#   bash tests/mutation/mutation.sh --survivors 'gemmscope.kernels.*' # those of some functions only
#   bash tests/mutation/mutation.sh --survivors none                  # the report only, written anew
#   bash tests/mutation/mutation.sh --resume                          # an interrupted run on: the mutants
#                                                                       # of the default functions not run yet
#   MUTATION_CHILDREN=4 bash tests/mutation/mutation.sh               # mutants run 4 at a time (default 1)
set -euo pipefail
cd "$(dirname "$0")/../.."
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
    # every function mutmut mutates in the four modules a verdict rests on (not the decorated ones:
    # kernels.decode, Verification's properties; tests/mutation/named_mutations.py changes those):
    # attribution: which NVTX ranges enclose a launch, their nesting, the innermost one a pattern
    # names (--expect-map, --allow), each process's rank, the launches frame and what the ranges
    # say of each launch (module, name, pass and its source, shapes)
    'gemmscope.assembly.attribution.*'
    # verify: what a run asked for, the verdict, cause and --allow per GEMM, ranks (mark, GPU, file
    # name), autotuning launches, the mapped ranges' table, the per-module, group and rank tables
    'gemmscope.judging.verify.*'
    # kernels: how a name's operand types and scales make a precision, per naming scheme, its arch
    'gemmscope.kernels.*'
    # scrub and redaction: what the redactor takes out and learns from a trace's records, the scrubbed copy
    'gemmscope.redaction.scrub.*'
    'gemmscope.redaction.policy.*'
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
report=docs/mutation-report.txt
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
  echo "survivors (tests/mutation/mutation-survivors.md says why each kind is left):"
  for name in $(survivors); do
    echo "== $name"
    mutmut show "$name" | sed -n '2,$p'
  done
} > "$report"
echo "$report"
