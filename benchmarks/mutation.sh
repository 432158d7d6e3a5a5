#!/bin/bash
# Mutation testing of the rules gemmscope's verdicts rest on (not part of CI: an hour or more on
# two cores). mutmut (pip install 'gemmscope[mutation]') changes one thing at a time in the
# functions named below and runs the tests that cover each one ([tool.mutmut] in pyproject.toml);
# a mutant no test kills is a survivor. Writes benchmarks/mutation-report.txt: date, commit, counts
# per function, and every survivor with its diff. Arguments replace the default function patterns.
#
#   bash benchmarks/mutation.sh                                   # the default functions below
#   bash benchmarks/mutation.sh 'gemmscope.scrub.*'               # one whole module
set -euo pipefail
cd "$(dirname "$0")/.."
export NSYS=${NSYS:-/opt/nsys-cpu/target-linux-x64/nsys}
functions=("$@")
if [ ${#functions[@]} -eq 0 ]; then
  functions=(
    # attribution: which NVTX ranges enclose a launch, and each process's rank
    'gemmscope.attribution.x__enclosing_ranges__*' 'gemmscope.attribution.x__parents__*'
    'gemmscope.attribution.x__innermost__*' 'gemmscope.attribution.x__ranks__*'
    # verify: a trace's rank from its file name, the verdict per GEMM
    'gemmscope.verify.x__fill_ranks__*' 'gemmscope.verify.x__rank_in_name__*' 'gemmscope.verify.x_verdict__*'
    # kernels: how a name's operand types and scales make a precision
    'gemmscope.kernels.x__precision__*' 'gemmscope.kernels.x__scale_mode__*' 'gemmscope.kernels.x__nvjet_operands__*'
    # scrub: what the redactor takes out
    'gemmscope.scrub.xǁRedactorǁ__init____*' 'gemmscope.scrub.xǁRedactorǁ__call____*'
    'gemmscope.scrub.x__alternation__*'
  )
fi
rm -rf mutants  # tests change between runs: mutmut copies them afresh
mutmut run "${functions[@]}" > /dev/null
report=benchmarks/mutation-report.txt
{
  echo "mutmut $(mutmut --version 2>/dev/null | awk '{print $NF}') on $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- gemmscope tests || echo ' + uncommitted changes')"
  echo
  echo "mutants per function (killed / all; survivors listed below):"
  mutmut results --all true | python3 -c '
import collections, fnmatch, sys
patterns = sys.argv[1:]
counts = collections.defaultdict(lambda: [0, 0])
for line in sys.stdin:
    name, _, status = line.strip().partition(": ")
    if not any(fnmatch.fnmatch(name, p) for p in patterns):
        continue
    function = name.split("__mutmut_")[0]
    counts[function][1] += 1
    counts[function][0] += status in ("killed", "timeout", "caught by type check")
for function, (killed, total) in sorted(counts.items()):
    print(f"  {function}: {killed} / {total}")
print(f"  all: {sum(k for k, _ in counts.values())} / {sum(t for _, t in counts.values())}")
' "${functions[@]}"
  echo
  for name in $(mutmut results | awk -F: '/survived|no tests/ {print $1}'); do
    for pattern in "${functions[@]}"; do
      # shellcheck disable=SC2053
      if [[ $name == $pattern ]]; then echo "== $name"; mutmut show "$name" | sed -n '2,$p'; break; fi
    done
  done
} > "$report"
echo "$report"
