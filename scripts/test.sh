#!/usr/bin/env bash
# The README's test command: installs what is needed, builds, and runs every test under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
bash scripts/build.sh -DDTRAIN_TESTS=ON
# ctest runs one test process per core; each gets 2 OpenMP threads (CMakeLists.txt), so the
# threaded code paths run. Waiting threads sleep (OMP_WAIT_POLICY=PASSIVE; the processes tests
# start inherit it): a thread that spins at a barrier holds a core that its partner, or another
# test's threads, need. Measured when the suite had 534 tests: spinning, two llama-tiny tests that
# take 0.3 s alone took 27 to 55 s side by side, and the suite 4.5 to 5.7 minutes on 2 cores (8 to
# 10 minutes of CPU); sleeping, 2 minutes (2.5 of CPU), no test slower by more than 1.6 s.
export OMP_WAIT_POLICY=PASSIVE
status=0
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 600 || status=$?

# A run that executed fewer tests than the suite holds says so last, with every skip's reason
# (tests/test_main.cpp prints one marker line per skipped test; ctest's log keeps them).
# (Read before `ctest -N`, which writes a new log.)
skips=$(grep -ah "^dtrain-test-outcome: skipped " build/Testing/Temporary/LastTest.log | sort -u |
        sed 's/^dtrain-test-outcome: skipped /  /' || true)
total=$(ctest --test-dir build -N | sed -n 's/^Total Tests: //p')
if [ -n "$skips" ]; then
  echo "tests: $total in the suite; these did not run here:"
  echo "$skips"
else
  echo "tests: $total in the suite; every one ran"
fi
exit "$status"
