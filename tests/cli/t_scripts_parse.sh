#!/bin/bash
# t_scripts_parse.sh — every shell script and Python script of the repository
# parses (`bash -n`; Python's compile(), which writes no .pyc).  Several of them only run where
# CI cannot go (scripts/device_job.sh and the GPU suite's scripts run on the
# lent GPU machine, whose time is scarce; bench/ runs by hand), so a syntax
# error there would otherwise first show in a device job.  One PASS or FAIL
# line per language, naming the files that do not parse.
set -u
cd "$(dirname "$0")/../.." || exit 1
# the tracked files: outside a git checkout (an unpacked release) there is no list
git ls-files --error-unmatch .ci/run >/dev/null 2>&1 || { echo "SKIP: scripts parse: not a git checkout"; exit 0; }
bad=""
n=0
while IFS= read -r f; do
    n=$((n + 1))
    bash -n "$f" 2>/dev/null || bad="$bad $f"
done < <(git ls-files '*.sh' .ci/run 2>/dev/null)
if [ "$n" -eq 0 ]; then echo "FAIL: shell scripts: none found"
elif [ -n "$bad" ]; then echo "FAIL: shell scripts that do not parse (bash -n):$bad"
else echo "PASS: $n shell scripts parse (bash -n)"; fi
bad=""
n=0
while IFS= read -r f; do
    n=$((n + 1))
    python3 -c 'import sys; compile(open(sys.argv[1]).read(), sys.argv[1], "exec")' "$f" 2>/dev/null || bad="$bad $f"
done < <(git ls-files '*.py' 2>/dev/null)
if [ -n "$bad" ]; then echo "FAIL: Python scripts that do not parse:$bad"
else echo "PASS: $n Python scripts parse"; fi
