#!/usr/bin/env bash
# Lint, run first by scripts/test.sh; fails on any finding.
#   1. clang-format: every C++ file of src/ test/ bench/ fuzz/ must already be formatted
#      (.clang-format; fix with clang-format -i FILE).
#   2. clang-tidy: the checks in .clang-tidy over src/**/*.cc, with the compile commands of the
#      release build (configured here if needed; only the generated protobuf headers are built).
# Needs clang-format and clang-tidy (scripts/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
build_dir=build

find_tool() {
  local name
  for name in "$1-14" "$1"; do
    if command -v "$name" >/dev/null; then
      echo "$name"
      return
    fi
  done
  echo "lint: $1 not found (scripts/install-deps.sh installs it)" >&2
  exit 1
}
clang_format=$(find_tool clang-format)
clang_tidy=$(find_tool clang-tidy)

# Our sources only: generated code lives in the build directory, test data has no C++.
mapfile -t sources < <(find src test bench fuzz -type f \( -name '*.cc' -o -name '*.h' \) | sort)
echo "lint: $clang_format over ${#sources[@]} files"
if ! "$clang_format" --dry-run --Werror "${sources[@]}"; then
  echo "lint: clang-format: the files above are not formatted (clang-format -i FILE)" >&2
  exit 1
fi

# clang-tidy reads the build's compile commands; the device plugin includes generated protobuf
# headers, which exist once the proto target has run.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
if [ ! -f "$build_dir/compile_commands.json" ]; then
  cmake --preset release >/dev/null
fi
cmake --build "$build_dir" --target toposched_generated_sources >/dev/null

mapfile -t units < <(find src -type f -name '*.cc' | sort)
echo "lint: $clang_tidy over ${#units[@]} files, $jobs at a time"
if ! printf '%s\n' "${units[@]}" |
    xargs -P "$jobs" -n 4 "$clang_tidy" -p "$build_dir" --quiet 2>/dev/null; then
  echo "lint: clang-tidy found the problems above (.clang-tidy says which checks run and why)" >&2
  exit 1
fi
echo "lint: clean"
