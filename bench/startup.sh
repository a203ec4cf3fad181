#!/usr/bin/env bash
# Start-up of a new user's first commands, as whole processes: a bare source launch (the floor), the Seeds
# single-file example, and a plain main that builds, compiles and runs the seeds' graph on the host backend.
# Prints the median wall time of N runs (default 7) after one warm-up run each. Build first:
#   ./mvnw -q -pl examples -am package -DskipTests
# Usage: bench/startup.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-7}
JAVA=${JAVA_HOME:+$JAVA_HOME/bin/}java
CP=$(./gatun-classpath)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'public class Hello { public static void main(String[] a) { System.out.println("hi"); } }\n' > "$tmp/Hello.java"
median() {  # runs "$@" N times after a warm-up; prints the median wall seconds
  "$@" >/dev/null 2>&1
  for _ in $(seq "$N"); do
    s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N)
    awk -v s="$s" -v e="$e" 'BEGIN { print e - s }'
  done | sort -n | awk '{a[NR]=$1} END {printf "%.2f s\n", a[int((NR+1)/2)]}'
}
echo "bare source launch:      $(median "$JAVA" "$tmp/Hello.java")"
echo "Seeds.java (source):     $(median "$JAVA" --enable-preview --enable-native-access=ALL-UNNAMED -cp "$CP" examples/single-file/Seeds.java)"
echo "seeds main (class path): $(median "$JAVA" --enable-native-access=ALL-UNNAMED -cp "$CP" dev.gatun.examples.Seeds)"
