#!/usr/bin/env bash
# scripts/gpu-check's harness without a GPU (docs/cuda-backend.md, "Running the GPU tests"):
#   parser     scripts/gtest-summary on synthetic gtest logs and JSON: CudaBf16 failures, skips, a
#              parameterised name, a run cut short by its timeout, a crash, an empty filter
#   plan       scripts/gpu-check --plan against the CPU build's test binary (the GPU suites are
#              there as SKIPPED stubs) and against fakes: a filter that matches nothing fails,
#              a new Cuda* suite runs in step 5 before CudaBf16 and CudaNccl
#   run        scripts/gpu-check --prebuilt on the CPU build's binaries: the steps' summary lines
#              in the planned order, one process per suite, each GPU test reported SKIPPED
# usage: tests/gpu_check_summary.sh parser|plan|run SOURCE_DIR [BUILD_DIR]
set -uo pipefail
what=$1 source_dir=$(realpath "$2") build_dir=$(realpath "${3:-.}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

expect() {  # expect NAME WANT GOT
  if [[ $2 == "$3" ]]; then echo "ok    $1"
  else printf 'FAIL  %s\n  want: %s\n  got:  %s\n' "$1" "$2" "$3"; failures=$((failures + 1)); fi
}
expect_match() {  # expect_match NAME EXTENDED_REGEX TEXT
  if grep -qE -- "$2" <<<"$3"; then echo "ok    $1"
  else printf 'FAIL  %s\n  want a match of: %s\n  in: %s\n' "$1" "$2" "$3"; failures=$((failures + 1)); fi
}
summary() { python3 "$source_dir/scripts/gtest-summary" "$@"; }

parser() {
  cat >"$work/bf16.log" <<'EOF'
[==========] Running 4 tests from 2 test suites.
[ RUN      ] CudaBf16.DenseGemmsRoundOperandsAndAccumulateInFp32
[       OK ] CudaBf16.DenseGemmsRoundOperandsAndAccumulateInFp32 (12 ms)
[ RUN      ] CudaBf16.BiLstmMatchesCpuOnRoundedOperands
/src/tests/test_cuda_bf16.cpp:161: Failure
The difference between got[i] and want[i] is 0.5, which exceeds tolerance
[  FAILED  ] CudaBf16.BiLstmMatchesCpuOnRoundedOperands (30 ms)
[ RUN      ] CudaBf16.CapturedGraphsGiveTheEagerBits
[  FAILED  ] CudaBf16.CapturedGraphsGiveTheEagerBits (3 ms)
[ RUN      ] CudaNccl.OneRankTrainingStepsEqualThePlainEngine
/src/tests/test_cuda_nccl.cpp:224: Skipped
this build has no NCCL (ENHANCED_NCCL)

[  SKIPPED ] CudaNccl.OneRankTrainingStepsEqualThePlainEngine (0 ms)
[==========] 4 tests from 2 test suites ran. (45 ms total)
[  PASSED  ] 1 test.
[  SKIPPED ] 1 test, listed below:
[  SKIPPED ] CudaNccl.OneRankTrainingStepsEqualThePlainEngine
[  FAILED  ] 2 tests, listed below:
[  FAILED  ] CudaBf16.BiLstmMatchesCpuOnRoundedOperands
[  FAILED  ] CudaBf16.CapturedGraphsGiveTheEagerBits

 2 FAILED TESTS
EOF
  expect "CudaBf16 failures and a skip, all counted, with the names" \
    "FAILED (1 passed, 2 failed: CudaBf16.BiLstmMatchesCpuOnRoundedOperands CudaBf16.CapturedGraphsGiveTheEagerBits [test_cuda_bf16.cpp:161: The difference between got[i] and want[i] is 0.5, which exceeds tolerance], 1 skipped: CudaNccl.OneRankTrainingStepsEqualThePlainEngine [test_cuda_nccl.cpp:224: this build has no NCCL (ENHANCED_NCCL)]; exit 1)" \
    "$(summary "$work/bf16.log" --exit 1)"

  # A skip alone is a failure too, and is not reported before the failures: here there are none.
  grep -v 'CudaBf16.Captured\|CudaBf16.BiLstm\|Failure\|difference\|FAILED' "$work/bf16.log" >"$work/skip.log"
  expect "a skip with no failure" \
    "FAILED (1 passed, 0 failed, 1 skipped: CudaNccl.OneRankTrainingStepsEqualThePlainEngine [test_cuda_nccl.cpp:224: this build has no NCCL (ENHANCED_NCCL)])" \
    "$(summary "$work/skip.log" --exit 0)"

  cat >"$work/param.log" <<'EOF'
[==========] Running 2 tests from 1 test suite.
[ RUN      ] Bf16Kernels/Avx512Bf16.Foo/0
[       OK ] Bf16Kernels/Avx512Bf16.Foo/0 (1 ms)
[ RUN      ] Bf16Kernels/Avx512Bf16.Foo/1
tests/test_precision.cpp:140: Failure
Expected equality of these values:
[  FAILED  ] Bf16Kernels/Avx512Bf16.Foo/1, where GetParam() = 4-byte object <01-00 00-00> (2 ms)
[  FAILED  ] 1 test, listed below:
[  FAILED  ] Bf16Kernels/Avx512Bf16.Foo/1, where GetParam() = 4-byte object <01-00 00-00>
EOF
  expect "a parameterised test's name" \
    "FAILED (1 passed, 1 failed: Bf16Kernels/Avx512Bf16.Foo/1 [test_precision.cpp:140: Expected equality of these values:], 0 skipped; exit 1)" \
    "$(summary "$work/param.log" --exit 1)"

  # Cut short: the step's timeout killed it in the middle of its third test.
  head -n 9 "$work/bf16.log" | sed '/CapturedGraphs.*(3 ms)/d' >"$work/cut.log"
  echo "some output of the test that hung" >>"$work/cut.log"
  expect "a run cut short by its timeout" \
    "FAILED (timed out after 60 s in CudaBf16.CapturedGraphsGiveTheEagerBits; 1 passed, 1 failed: CudaBf16.BiLstmMatchesCpuOnRoundedOperands [test_cuda_bf16.cpp:161: The difference between got[i] and want[i] is 0.5, which exceeds tolerance], 0 skipped)" \
    "$(summary "$work/cut.log" --exit 124 --limit 60)"
  expect "a crash in the middle of a test" \
    "FAILED (exit 139 in CudaBf16.CapturedGraphsGiveTheEagerBits, which did not end; 1 passed, 1 failed: CudaBf16.BiLstmMatchesCpuOnRoundedOperands [test_cuda_bf16.cpp:161: The difference between got[i] and want[i] is 0.5, which exceeds tolerance], 0 skipped)" \
    "$(summary "$work/cut.log" --exit 139)"

  head -n 3 "$work/bf16.log" | sed 's/Running 4 tests from 2/Running 1 test from 1/' >"$work/ok.log"
  echo '[  PASSED  ] 1 test.' >>"$work/ok.log"
  expect "every test passed" "ok (1 passed)" "$(summary "$work/ok.log" --exit 0)"
  expect "passed, but the process failed after them" "FAILED (1 passed, 0 failed, 0 skipped; exit 134)" \
    "$(summary "$work/ok.log" --exit 134)"
  printf '%s\n' '[==========] Running 0 tests from 0 test suites.' '[==========] 0 tests from 0 test suites ran. (0 ms total)' \
    '[  PASSED  ] 0 tests.' >"$work/none.log"
  expect "a filter that matched no test" "FAILED (the filter matched no test)" "$(summary "$work/none.log" --exit 0)"
  : >"$work/empty.log"
  expect "a binary that did not start" "FAILED (exit 127, no test ran)" "$(summary "$work/empty.log" --exit 127)"

  # gtest's JSON, where it exists, is read instead of the log (here a log that says nothing).
  cat >"$work/run.json" <<'EOF'
{"tests": 3, "failures": 1, "testsuites": [
 {"name": "CudaBf16", "testsuite": [
  {"name": "BiLstmMatchesCpuOnRoundedOperands", "status": "RUN", "result": "COMPLETED", "classname": "CudaBf16",
   "failures": [{"failure": "/src/tests/test_cuda_bf16.cpp:161\nThe difference is 0.5\n", "type": ""}]},
  {"name": "EmulatedPrecisionIsRefusedOnCuda", "status": "RUN", "result": "COMPLETED", "classname": "CudaBf16"}]},
 {"name": "Bf16Kernels/Avx512Bf16", "testsuite": [
  {"name": "Foo/0", "value_param": "4", "status": "RUN", "result": "SKIPPED", "classname": "Bf16Kernels/Avx512Bf16",
   "skipped": [{"message": "/src/tests/test_precision.cpp:120\nno AVX512-BF16 here\n"}]},
  {"name": "DISABLED_Bar", "status": "NOTRUN", "result": "SUPPRESSED", "classname": "Bf16Kernels/Avx512Bf16"}]}]}
EOF
  expect "gtest's JSON: failures, a parameterised skip, a disabled test left out" \
    "FAILED (1 passed, 1 failed: CudaBf16.BiLstmMatchesCpuOnRoundedOperands [test_cuda_bf16.cpp:161: The difference is 0.5], 1 skipped: Bf16Kernels/Avx512Bf16.Foo/0 [test_precision.cpp:120: no AVX512-BF16 here]; exit 1)" \
    "$(summary "$work/empty.log" --json "$work/run.json" --exit 1)"
  # gtest 1.12 writes no skip message into its JSON: the reason comes from the finished log.
  sed 's/"skipped": \[{"message": "[^"]*"}\]/"time": "0s"/' "$work/run.json" >"$work/run-1.12.json"
  grep -A4 '^\[ RUN .*CudaNccl' "$work/bf16.log" | sed 's/CudaNccl.OneRankTrainingStepsEqualThePlainEngine/Bf16Kernels\/Avx512Bf16.Foo\/0/' >"$work/skip-reason.log"
  expect "gtest 1.12's JSON (no skip messages): the skip's reason from the log" \
    "FAILED (1 passed, 1 failed: CudaBf16.BiLstmMatchesCpuOnRoundedOperands [test_cuda_bf16.cpp:161: The difference is 0.5], 1 skipped: Bf16Kernels/Avx512Bf16.Foo/0 [test_cuda_nccl.cpp:224: this build has no NCCL (ENHANCED_NCCL)]; exit 1)" \
    "$(summary "$work/skip-reason.log" --json "$work/run-1.12.json" --exit 1)"
  expect "a JSON file the killed run never wrote: the log serves" \
    "$(summary "$work/cut.log" --exit 124 --limit 60)" \
    "$(summary "$work/cut.log" --json "$work/missing.json" --exit 124 --limit 60)"
  summary "$work/missing.log" >"$work/out" 2>&1
  expect "an unreadable log: one error line naming it" \
    "2 error: $work/missing.log: No such file or directory, cannot read the log" "$? $(cat "$work/out")"
  sanitizer_logs
}

# compute-sanitizer's failures (exit 99): the count and the first error, whatever its kind.
sanitizer_logs() {
  cat >"$work/initcheck.log" <<'EOF'
========= COMPUTE-SANITIZER
[==========] Running 1 test from 1 test suite.
[ RUN      ] CudaParity.ModelLossAndEveryGradientMatchCpu
========= Host API memory access error at host access to 0x7f31c2a00008 of size 8 bytes
=========     Uninitialized access at 0x7f31c2a00008 on access by cudaMemcpyAsync source
=========     Saved host backtrace up to driver entry point at error
[       OK ] CudaParity.ModelLossAndEveryGradientMatchCpu (812 ms)
[==========] 1 test from 1 test suite ran. (812 ms total)
[  PASSED  ] 1 test.
========= ERROR SUMMARY: 1 error
EOF
  expect "initcheck's host API error, with the tests passing" \
    "FAILED (ERROR SUMMARY: 1 error: Host API memory access error at host access to 0x7f31c2a00008 of size 8 bytes)" \
    "$(summary "$work/initcheck.log" --sanitizer --exit 99)"
  sed -e 's/Host API memory access error at host access to 0x7f31c2a00008 of size 8 bytes/Invalid __global__ read of size 4 bytes/' \
    -e 's/1 error$/3 errors/' "$work/initcheck.log" >"$work/memcheck.log"
  expect "memcheck's kernel error" "FAILED (ERROR SUMMARY: 3 errors: Invalid __global__ read of size 4 bytes)" \
    "$(summary "$work/memcheck.log" --sanitizer --exit 99)"
  sed 's/^\(\[ RUN .*\)$/\1\n========= Warning: Unable to find the device'"'"'s source lines/' "$work/initcheck.log" >"$work/warned.log"
  expect "a warning before the error is not the error" \
    "FAILED (ERROR SUMMARY: 1 error: Host API memory access error at host access to 0x7f31c2a00008 of size 8 bytes)" \
    "$(summary "$work/warned.log" --sanitizer --exit 99)"
  expect "a sanitizer run that exited 0 is judged as a plain run" "ok (1 passed)" \
    "$(summary "$work/initcheck.log" --sanitizer --exit 0)"
}

# A stand-in test binary that lists the tests of a file in gtest's --gtest_list_tests format.
fake_binary() {
  local list=$1 bin=$2
  printf '#!/bin/sh\ncat %q\n' "$list" >"$bin"
  chmod +x "$bin"
}

plan() {
  local tests=$build_dir/tests/enhanced_tests out rc
  out=$("$source_dir/scripts/gpu-check" --plan "$tests" 2>&1)
  rc=$?
  echo "$out"
  expect "the plan fits the CPU build's tests" 0 "$rc"
  expect "the steps in order: parity, short bench, sanitizer, suites, bench" \
    "2-parity 3-bench-short 4-sanitizer 5-suites 6-bench" "$(awk '{print $1}' <<<"$out" | uniq | tr '\n' ' ' | sed 's/ $//')"
  expect "one process per suite, bf16 and then NCCL last, NCCL with NCCL_DEBUG=WARN" \
    "CudaPipeline.* CudaTrainCli.* CudaTrainingParity.* CudaSyncToDevice.* CudaBf16.* NCCL_DEBUG=WARN CudaNccl.*" \
    "$(awk '$1 == "5-suites" {$1 = $2 = $3 = $4 = ""; print}' <<<"$out" | xargs echo)"
  expect_match "one short bench line per precision" \
    "3-bench-short .*--device cuda --precision bf16 --warmup 1 --repeats 3" "$out"

  # A suite the plan does not know runs in step 5 too, before CudaBf16; a test the sanitizer's
  # filter names that the binary lacks fails the plan.
  "$tests" --gtest_list_tests >"$work/list"
  printf 'CudaNewThing.\n  Works\n' >>"$work/list"
  fake_binary "$work/list" "$work/with-new-suite"
  out=$("$source_dir/scripts/gpu-check" --plan "$work/with-new-suite" 2>&1)
  expect "a new Cuda* suite: the plan still fits" 0 "$?"
  expect "a new Cuda* suite runs in step 5, before CudaBf16" \
    "CudaPipeline.* CudaTrainCli.* CudaTrainingParity.* CudaSyncToDevice.* CudaNewThing.* CudaBf16.* NCCL_DEBUG=WARN CudaNccl.*" \
    "$(awk '$1 == "5-suites" {$1 = $2 = $3 = $4 = ""; print}' <<<"$out" | xargs echo)"
  grep -v '^  BiLstmMatchesCpuOnRoundedOperands' "$work/list" >"$work/list-without"
  fake_binary "$work/list-without" "$work/without-a-test"
  out=$("$source_dir/scripts/gpu-check" --plan "$work/without-a-test" 2>&1)
  expect "a filter that names a test the binary lacks fails the plan" 1 "$?"
  expect_match "... and says which" "plan: 'CudaBf16.BiLstmMatchesCpuOnRoundedOperands' matches no test" "$out"
  printf 'Other.\n  Test\n' >"$work/list-none"
  fake_binary "$work/list-none" "$work/no-gpu-tests"
  out=$("$source_dir/scripts/gpu-check" --plan "$work/no-gpu-tests" 2>&1)
  expect "a binary without the GPU suites fails the plan" 1 "$?"
  expect_match "... naming the suite" "plan: 'CudaParity\.\*' matches no test" "$out"
}

run() {
  local out=$work/out binaries=$work/binaries rc
  mkdir -p "$out" "$binaries/tests" "$binaries/apps"
  # The build's test binary, and a stand-in bench that records its arguments (the real one would
  # spend its 45 s on the CPU line).
  ln -s "$build_dir/tests/enhanced_tests" "$binaries/tests/enhanced_tests"
  printf '#!/bin/sh
echo "$*" >>%q
echo "train step 1.0 ms"
' "$work/bench-args" >"$binaries/apps/enhanced-bench"
  chmod +x "$binaries/apps/enhanced-bench"
  OUT=$out ENHANCED_GPU_CHECK_BINARIES=$binaries ENHANCED_GPU_CHECK_BUDGET=600 \
    "$source_dir/scripts/gpu-check" --prebuilt >"$work/run.log" 2>&1
  rc=$?
  cat "$out/summary.txt"
  expect "the bench lines: one short per precision first, then the long ones" \
    "--device cuda --warmup 1 --repeats 3 --no-loader|--device cuda --precision bf16 --warmup 1 --repeats 3 --no-loader|--device cuda --cuda-graphs off --no-loader|--device cuda --tf32 --no-loader|--device cuda --zipf 1.1 --no-loader|--device cpu --repeats 3 --no-loader" \
    "$(paste -sd'|' "$work/bench-args")"
  expect "a run whose GPU tests all SKIP fails" 1 "$rc"
  expect "every step's line, each suite's as it ended, in the planned order" \
    "environment build parity bench-short sanitizer suite:CudaPipeline suite:CudaTrainCli suite:CudaTrainingParity suite:CudaSyncToDevice suite:CudaBf16 suite:CudaNccl suites bench" \
    "$(awk '{print $1 ($1 == "suite" ? ":" $2 : "")}' "$out/summary.txt" | sed 's/:$//' | tr '\n' ' ' | sed 's/ $//')"
  expect_match "the parity step reports each skip" \
    "^parity +FAILED \([0-9]+ passed, 0 failed, [0-9]+ skipped: CudaParity\.[A-Za-z]+ .*\[test_cuda_parity\.cpp:[0-9]+: " "$(cat "$out/summary.txt")"
  expect_match "CudaNccl runs alone, with NCCL_DEBUG=WARN" \
    "NCCL_DEBUG=WARN .*enhanced_tests --gtest_filter='CudaNccl\.\*'" "$(cat "$out/5-suites.log")"
  expect "one log a step and summary.txt under OUT: 8 files, what the device tool returns" \
    "0-environment.log 1-build.log 2-parity.log 3-bench-short.log 4-sanitizer.log 5-suites.log 6-bench.log summary.txt" \
    "$(cd "$out" && ls | tr '\n' ' ' | sed 's/ $//')"
}

case $what in
  parser|plan|run) "$what" ;;
  *) echo "usage: $0 parser|plan|run SOURCE_DIR [BUILD_DIR]" >&2; exit 2 ;;
esac
((failures == 0)) || { echo "$failures check(s) failed"; exit 1; }
