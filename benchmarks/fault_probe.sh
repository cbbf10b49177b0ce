#!/bin/bash
# The fault probe of issue 42, as a hostile but realistic user runs it: each command of the
# issue, its exit status, the last lines it printed on stderr, its peak resident memory and
# whether a traceback appeared; then what each left in its directory. docs/reliability.md's
# table of faults tried comes from its output.
#
#   bash benchmarks/fault_probe.sh [WORKDIR]      # about 3 minutes on 2 cores
#
# Needs GNU time (/usr/bin/time) and prlimit; as root it also mounts two small tmpfs (a full
# disk, a read-only one) under WORKDIR, and unmounts them at the end. Every command runs under
# a 6 GB address-space limit, so an input that would take the machine down is killed instead.
# PYTHON picks the interpreter (default: .venv/bin/python of this checkout, else python).
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$REPO/.venv/bin/python}
[ -x "$PY" ] || PY=python
W=${1:-$(mktemp -d /tmp/fault_probe.XXXX)}
mkdir -p "$W" && cd "$W" || exit 1
S="$PY -m sim"
MB() { echo $(( $(tail -1 "$W/.mem") / 1024 )); }
run() { # label, command...
  local label=$1; shift
  /usr/bin/time -f "%M" -o "$W/.mem" prlimit --as=6000000000 "$@" > "$W/.out" 2> "$W/.err"
  local rc=$?
  echo "== $label: exit $rc, peak RSS $(MB) MB, tracebacks $(grep -c Traceback "$W/.err")"
  grep -v '^\s*$' "$W/.err" | tail -2 | cut -c1-260 | sed 's/^/   /'
}
lsdir() { echo "   $1 holds: $(ls -A "$1" 2>/dev/null | tr '\n' ' ')"; }

echo "# 1.1 a sweep into a dir another sweep used"
run "sweep rate=2,4,8,16 into D" $S -m workload.num_requests=50 workload.rate=2,4,8,16 hydra.sweep.dir=D
run "sweep rate=3,5 into D" $S -m workload.num_requests=50 workload.rate=3,5 hydra.sweep.dir=D
grep -v '^sweep: The runs\|^\[' "$W/.out" | grep "^sweep:" | cut -c1-200 | sed 's/^/   /'
echo "   D/sweep.csv rates: $(cut -d, -f1 D/sweep.csv | tail -n +2 | tr '\n' ' ')"
run "sweep rate=3,5 into E" $S -m workload.num_requests=50 workload.rate=3,5 hydra.sweep.dir=E
run "sweep rate=2,4,8,16 into E" $S -m workload.num_requests=50 workload.rate=2,4,8,16 hydra.sweep.dir=E
echo "   E/sweep.csv rates: $(cut -d, -f1 E/sweep.csv | tail -n +2 | tr '\n' ' ')"

echo "# 1.2 a rerun into a run dir"
run "rate=4 into R" $S workload.num_requests=50 workload.rate=4 hydra.run.dir=R
run "rate=30 output.report=false into R" $S workload.num_requests=50 workload.rate=30 output.report=false hydra.run.dir=R
grep "^Outputs\|Request throughput" "$W/.out" | sed 's/^/   /'; lsdir R

echo "# 1.3 two runs at once into one dir"
$S workload.num_requests=100000 seed=1 hydra.run.dir=L > /dev/null 2>&1 & A=$!
sleep 3
run "seed=2 into L while seed=1 runs" $S workload.num_requests=50 seed=2 hydra.run.dir=L
wait $A; echo "   the first: exit $?"

echo "# 1.4 killed runs"
for sig in TERM KILL; do
  $S workload.num_requests=200000 hydra.run.dir=K$sig > /dev/null 2>&1 & A=$!
  sleep 25; kill -$sig $A 2>/dev/null; wait $A 2>/dev/null; sleep 2
  echo "== kill -$sig after 25 s: processes of the run left: $(pgrep -f "hydra.run.dir=K$sig" | wc -l)"
  lsdir K$sig
done
run "rerun into KKILL" $S workload.num_requests=50 hydra.run.dir=KKILL
lsdir KKILL

echo "# 2.1 sparse 5 GB files"
for ext in csv jsonl json yaml; do
  truncate -s 5G t.$ext
  run "workload.path=t.$ext (5 GB sparse)" $S workload=trace workload.path=t.$ext workload.num_requests=50 hydra.run.dir=T$ext
  rm -f t.$ext
done
truncate -s 5G big.yaml; truncate -s 5G big.json
run "validate.cases=big.yaml (5 GB sparse)" $S scenario=validate validate.cases=big.yaml hydra.run.dir=T1
run "hardware=big.yaml (5 GB sparse)" $S hardware=$W/big.yaml hydra.run.dir=T2
run "model=big.json (5 GB sparse)" $S model=$W/big.json hydra.run.dir=T3
rm -f big.yaml big.json

echo "# 2.4, 2.5 extreme numbers, symlink loops, output dirs"
run "workload.rate=1e-300" $S workload.rate=1e-300 workload.num_requests=50 hydra.run.dir=Z
run "max_sim_time_s=1e308" $S max_sim_time_s=1e308 workload.num_requests=50 hydra.run.dir=Z2
ln -sf loop1 loop2; ln -sf loop2 loop1; ln -sf x2.json x.json; ln -sf x.json x2.json
run "workload.path=a symlink loop" $S workload=trace workload.path=loop1 hydra.run.dir=Y1
run "workload.lengths=a symlink loop" $S workload.lengths=loop1 hydra.run.dir=Y2
run "model=a symlink loop .json" $S model=$W/x.json hydra.run.dir=Y3
touch afile
run "hydra.run.dir=a file" $S workload.num_requests=50 hydra.run.dir=afile
run "hydra.run.dir=under a file" $S workload.num_requests=50 hydra.run.dir=afile/x
run "hydra.run.dir=a 300-character name" $S workload.num_requests=50 hydra.run.dir=$(printf 'n%.0s' {1..300})
if [ "$(id -u)" = 0 ]; then
  mkdir -p full ro && mount -t tmpfs -o size=64k tmpfs full && mount -t tmpfs -o size=1m,ro tmpfs ro
  run "hydra.run.dir on a read-only disk" $S workload.num_requests=50 hydra.run.dir=ro/run
  run "hydra.run.dir on a disk of 64 KB" $S workload.num_requests=50 hydra.run.dir=full/run
  umount full ro
fi
set -m  # job control: the sweep in a process group of its own, SIGINT at its default (a
# background job of a script starts with it ignored), as a terminal's job is
env --default-signal=INT $S -m workload.num_requests=200000 workload.rate=8,9,10,11 hydra.sweep.dir=CC > /dev/null 2> cc.err & A=$!
set +m
sleep 15; kill -INT -- -$A; wait $A
echo "== Ctrl-C on a -m sweep after 15 s: exit $?, tracebacks $(grep -c Traceback cc.err)"
tail -1 cc.err | cut -c1-260 | sed 's/^/   /'

echo "# 2.6 small ones"
printf 'arrival_time_s,input_tokens,output_tokens,input_tokens\n0,10,10,20\n1,10,10,20\n' > dup.csv
run "a trace with a column twice" $S workload=trace workload.path=dup.csv hydra.run.dir=Q1
mkdir -p tdir; mkfifo fifo
run "a directory as a trace" $S workload=trace workload.path=tdir hydra.run.dir=Q2
run "a FIFO as a trace" $S workload=trace workload.path=fifo hydra.run.dir=Q3

echo "# case files (2.2, 2.3, 2.6)"
case_file() { # file, id line, engine_args line, rate line, text before
  printf '%s\ncases:\n- %s\n  engine: vllm@0.11.0\n  hardware: h100-sxm\n  model: llama-3.1-8b\n  engine_args:\n    %s\n  workload:\n    poisson:\n      %s\n      num_requests: 30\n      input_len: 200\n      output_len: 50\n  measured:\n    median_tpot_ms: 10.0\n' "${5:-}" "$2" "$3" "$4" > "$1"
}
BOMB='a0: &a0 ["xxxxxxxxxxxxxxxx","xxxxxxxxxxxxxxxx","xxxxxxxxxxxxxxxx","xxxxxxxxxxxxxxxx","xxxxxxxxxxxxxxxx","xxxxxxxxxxxxxxxx","xxxxxxxxxxxxxxxx","xxxxxxxxxxxxxxxx","xxxxxxxxxxxxxxxx"]'
for i in 1 2 3 4 5 6 7 8; do BOMB="$BOMB"$'\n'"a$i: &a$i [$(printf "*a$((i-1)),%.0s" {1..8})*a$((i-1))]"; done
case_file bomb.yaml 'id: bomb' 'max_num_seqs: *a8' 'rate: 4' "$BOMB"
run "an eight-level alias bomb in engine_args" $S scenario=validate validate.cases=bomb.yaml hydra.run.dir=C1
echo "   C1 size: $(du -sk C1 | cut -f1) KB"
case_file xss.yaml 'id: "<script>alert(1)</script>|a|b"' 'max_num_seqs: 64' 'rate: 4e0'
run "id <script>...|a|b, rate: 4e0" $S scenario=validate validate.cases=xss.yaml hydra.run.dir=C2
echo "   <script> in report.html: $(grep -c '<script>' C2/report.html), rows of report.md's table with the id: $(grep -c '^| &lt;script>alert(1)&lt;/script>\\|a\\|b | median_tpot_ms' C2/report.md)"
case_file n.yaml 'id: null' 'max_num_seqs: 64' 'rate: 4'
run "id: null" $S scenario=validate validate.cases=n.yaml hydra.run.dir=C3
grep "failed" "$W/.out" | head -1 | sed 's/^/   /'
case_file e.yaml 'id: ""' 'max_num_seqs: 64' 'rate: 4'
run "id: \"\", validate.jobs=100000" $S scenario=validate validate.cases=e.yaml validate.jobs=100000 hydra.run.dir=C4
grep "failed\|cores" "$W/.out" "$W/.err" | head -2 | cut -d: -f2- | sed 's/^/   /'
echo "# done in $W"
