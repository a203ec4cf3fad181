#!/usr/bin/env bash
# Builds the self-contained GPU test bundle in <repo>/.bundle:
#   java/                 a jlinked Java runtime (no JDK needed on the GPU host)
#   lib/                  every module's main jar + runtime/test dependencies + the JUnit console launcher
#   test-classes/<module> every module's compiled tests (scanned by the launcher)
#   run-gpu-tests.sh      runs the "gpu"-tagged tests (or all tests with --all) with --enable-native-access
# Usage: bundle/build.sh [-pl module[,module]]  (default: the whole reactor; -pl cuda-backend builds it and what it needs)
# Env: JAVA_HOME (a JDK 25), BUNDLE_OUT (default <repo>/.bundle), BUNDLE_MAVEN_ARGS (more Maven arguments, e.g. -Pjmh
#      for the planner's JMH benchmarks: org.openjdk.jmh.Main through run-gpu-tests.sh --main), BUNDLE_TAR=0 to leave java/lib/test-classes unpacked
#      (default: packed into payload.tar.gz, which run-gpu-tests.sh unpacks to /tmp/gatun-bundle).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${BUNDLE_OUT:-$ROOT/.bundle}
export JAVA_HOME=${JAVA_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}
export PATH=$JAVA_HOME/bin:$PATH
JUNIT_PLATFORM_VERSION=${JUNIT_PLATFORM_VERSION:-1.11.4}
PL=()
if [ "${1:-}" = "-pl" ]; then PL=(-pl "$2" -am); fi

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/lib" "$STAGE/deps" "$STAGE/test-classes"

cd "$ROOT"
# JUnit's own jars come with the console launcher; leave them out of the copied dependencies.
# AssertJ's byte-buddy (8 MB) serves only its soft assertions and assumptions, which no test uses: left out too, so
# the bundle and the working tree stay within what a device call carries.
EXCLUDE=byte-buddy,junit-jupiter,junit-jupiter-api,junit-jupiter-engine,junit-jupiter-params,junit-platform-commons,junit-platform-engine,junit-platform-launcher,opentest4j,apiguardian-api
# shellcheck disable=SC2086
./mvnw -q -B "${PL[@]}" ${BUNDLE_MAVEN_ARGS:-} -DskipTests package dependency:copy-dependencies \
    -DincludeScope=test -DexcludeGroupIds=dev.gatun -DexcludeArtifactIds=$EXCLUDE -DoutputDirectory="$STAGE/deps"
./mvnw -q -B -N dependency:copy -Dartifact=org.junit.platform:junit-platform-console-standalone:$JUNIT_PLATFORM_VERSION \
    -DoutputDirectory="$STAGE/lib"
cp "$STAGE"/deps/*.jar "$STAGE/lib/" 2>/dev/null || true

# Every module that was built: its main jar and its test classes.
for pom in */pom.xml; do
    m=$(dirname "$pom")
    [ -d "$m/target" ] || continue
    for j in "$m"/target/*.jar; do
        case "$j" in *-sources.jar|*-javadoc.jar|*-tests.jar) ;; *) [ -f "$j" ] && cp "$j" "$STAGE/lib/";; esac
    done
    if [ -d "$m/target/test-classes" ] && [ -n "$(ls -A "$m/target/test-classes")" ]; then
        cp -r "$m/target/test-classes" "$STAGE/test-classes/$m"
    fi
done
# transformers' reference checkpoints (8 MiB of random weights) are host tests' data: left out, so the bundle and the
# working tree stay within what a device call carries (64 MiB); BUNDLE_REFERENCES=1 keeps them
[ "${BUNDLE_REFERENCES:-0}" = 1 ] || rm -rf "$STAGE/test-classes/models/references"

# A small runtime: what the jars need (checked with jdeps on the project jars), plus what JUnit/AssertJ/jqwik use, and
# JDK Flight Recorder (jdk.jfr) for profiling the host side on the GPU machine (-XX:StartFlightRecording).
MODULES=java.base,java.logging,java.management,java.xml,java.sql,java.naming,jdk.unsupported,jdk.zipfs,jdk.crypto.ec,jdk.jfr
rm -rf "$OUT"
mkdir -p "$OUT"
STRIP=(--strip-debug)
if command -v objcopy >/dev/null; then
    # --strip-debug plus native symbols; the two options cannot be combined
    STRIP=(--strip-java-debug-attributes --strip-native-debug-symbols exclude-debuginfo-files)
fi
jlink --add-modules "$MODULES" "${STRIP[@]}" --no-man-pages --no-header-files --compress zip-9 \
    --output "$STAGE/java"

cp "$ROOT/bundle/run-gpu-tests.sh" "$STAGE/run-gpu-tests.sh"
chmod +x "$STAGE/run-gpu-tests.sh"
if [ "${BUNDLE_TAR:-1}" = "1" ]; then
    tar -C "$STAGE" -czf "$OUT/payload.tar.gz" java lib test-classes
    cp "$STAGE/run-gpu-tests.sh" "$OUT/"
else
    cp -r "$STAGE"/java "$STAGE"/lib "$STAGE"/test-classes "$STAGE"/run-gpu-tests.sh "$OUT/"
fi
cp "$ROOT/ffm-cuda/bench/launch_overhead.cu" "$OUT/" 2>/dev/null || true
du -sh "$OUT"
echo "bundle ready: $OUT (run: $OUT/run-gpu-tests.sh [--all] [extra ConsoleLauncher options])"
