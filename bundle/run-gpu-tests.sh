#!/usr/bin/env bash
# Runs the bundle's tests with the bundled Java runtime. Default: only tests tagged "gpu"; --all: every test.
# Extra arguments go to the JUnit ConsoleLauncher (for example --include-package dev.gatun.cuda).
# --main CLASS ARGS... runs a main class on the bundle's class path instead (for example dev.gatun.cuda.LaunchOverhead).
# Reports (XML) go to $GATUN_TEST_REPORTS (default ./gatun-test-reports).
# The environment is passed through untouched, child JVMs included (NCCL_NVLS_ENABLE=0 etc. stay set).
set -uo pipefail
DIR=$(cd "$(dirname "$0")" && pwd)
B=$DIR
if [ -f "$DIR/payload.tar.gz" ]; then
    B=${GATUN_BUNDLE_DIR:-/tmp/gatun-bundle}
    # unpacked once per payload: a later call with the same payload (size, time and path in the stamp, written only
    # after a whole unpacking) reuses it, so a script that runs many mains does not unpack it each time
    STAMP="$(stat -c '%s %Y' "$DIR/payload.tar.gz") $DIR"
    # under a lock: two scripts started at once (say, two benches on different GPUs) unpack it once, not over each other
    exec 9>"$B.lock" && flock 9
    if [ "$(cat "$B/.payload-stamp" 2>/dev/null)" != "$STAMP" ]; then
        rm -rf "$B" && mkdir -p "$B" && tar -C "$B" -xzf "$DIR/payload.tar.gz" && echo "$STAMP" > "$B/.payload-stamp"
    fi
    flock -u 9 && exec 9>&-
fi
FILTER=(--include-tag gpu)
if [ "${1:-}" = "--all" ]; then FILTER=(); shift; fi
if [ "${1:-}" = "--main" ]; then shift; CLS=$1; shift; FILTER=(); MAIN=1; else MAIN=0; fi
CP=$(ls "$B"/lib/*.jar | tr '\n' ':')
for d in "$B"/test-classes/*/; do CP="$CP$d:"; done
JAVA="$B/java/bin/java"
if [ "$MAIN" = "1" ]; then
    exec "$JAVA" --enable-native-access=ALL-UNNAMED -cp "$CP" "$CLS" "$@"
fi
REPORTS=${GATUN_TEST_REPORTS:-$PWD/gatun-test-reports}
mkdir -p "$REPORTS"
exec "$JAVA" --enable-native-access=ALL-UNNAMED -Xss4m -cp "$CP" org.junit.platform.console.ConsoleLauncher execute \
    --disable-banner --details=tree --scan-class-path "${FILTER[@]}" \
    --config "jqwik.database=$REPORTS/jqwik-database" --config jqwik.reporting.onlyfailures=true --reports-dir "$REPORTS" "$@"
