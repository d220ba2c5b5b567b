#!/usr/bin/env bash
# Lint, run first by scripts/test.sh; fails on any finding.
#   0. the module graph (scripts/check-modules.py): an include from a module of src/ to one the
#      table of docs/architecture.md does not let it reach fails, so the layout keeps itself.
#   1. thread safety: every translation unit of src/ compiled by clang++ -fsyntax-only with
#      -Wthread-safety -Werror=thread-safety, from the release build's compile commands (configured
#      here if needed; only the generated protobuf headers are built). A member marked
#      TS_GUARDED_BY read without its lock, or a TS_REQUIRES function called without it
#      (base/mutex.h), fails here, whatever compiler the builds use; so does a std mutex, lock or
#      condition variable outside base/mutex.h. About 90 CPU-seconds for 69 units (under
#      2 minutes on 2 shared cores).
#   2. clang-format: every C++ file of src/ test/ bench/ fuzz/ must already be formatted
#      (.clang-format; fix with clang-format -i FILE).
#   3. clang-tidy: the checks in .clang-tidy over src/**/*.cc, with the same compile commands.
# Needs clang++, clang-format and clang-tidy (scripts/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
python3 scripts/check-modules.py --self-test >/dev/null
python3 scripts/check-modules.py
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
clang_cxx=$(find_tool clang++)
clang_format=$(find_tool clang-format)
clang_tidy=$(find_tool clang-tidy)

# The compile commands of the release build; the device plugin includes generated protobuf
# headers, which exist once the proto target has run.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
if [ ! -f "$build_dir/compile_commands.json" ]; then
  cmake --preset release >/dev/null
fi
cmake --build "$build_dir" --target toposched_generated_sources >/dev/null

# 1. Thread safety. Every lock of src/ is one the analysis knows (base/mutex.h).
if grep -rnE 'std::(mutex|shared_mutex|timed_mutex|recursive_mutex|condition_variable(_any)?|lock_guard|unique_lock|scoped_lock|shared_lock)\b' \
    src --include='*.h' --include='*.cc' | grep -v '^src/base/mutex\.h:'; then
  echo "lint: use Mutex/SharedMutex, MutexLock/ReaderLock and CondVar (src/base/mutex.h)" \
    "instead of the std types above, so that -Wthread-safety checks them" >&2
  exit 1
fi
# Each src/*.cc entry of compile_commands.json becomes one clang++ run: the
# build's own flags (gcc's are clang's too), then only the thread-safety warnings, as errors.
# CMake writes one "directory", "command" and "file" line per entry; the command is a shell
# command line, JSON-escaped.
tsa_dir=$(mktemp -d)
trap 'rm -rf "$tsa_dir"' EXIT
awk -v root="$PWD/src/" '
  function value(line, key) { sub("^ *\"" key "\": \"", "", line); sub("\",?$", "", line); return line }
  /^ *"directory": / { dir = value($0, "directory") }
  /^ *"command": / { cmd = value($0, "command") }
  /^ *"file": / {
    file = value($0, "file")
    if (index(file, root) == 1 && file ~ /\.cc$/) print dir "\t" cmd
  }' "$build_dir/compile_commands.json" >"$tsa_dir/entries"
n=0
while IFS=$'\t' read -r dir cmd; do
  cmd=$(printf '%s' "$cmd" | sed 's/\\\(["\\]\)/\1/g')  # JSON unescape: \" and \\
  n=$((n + 1))
  # Replace the compiler (the first word); -fsyntax-only writes no object.
  printf 'cd %q && %q %s -fsyntax-only -Wno-everything -Wthread-safety -Werror=thread-safety\n' \
    "$dir" "$clang_cxx" "${cmd#* }" >"$tsa_dir/$n.sh"
done <"$tsa_dir/entries"
if [ "$n" -lt 10 ]; then
  echo "lint: only $n units of src/ in $build_dir/compile_commands.json" >&2
  exit 1
fi
echo "lint: $clang_cxx -Werror=thread-safety over $n files, $jobs at a time"
if ! find "$tsa_dir" -name '*.sh' -print0 | xargs -0 -P "$jobs" -n 1 sh; then
  echo "lint: thread-safety analysis failed above: take the lock the member is TS_GUARDED_BY," \
    "or annotate the function TS_REQUIRES (src/base/mutex.h)" >&2
  exit 1
fi

# Our sources only: generated code lives in the build directory, test data has no C++.
mapfile -t sources < <(find src test bench fuzz -type f \( -name '*.cc' -o -name '*.h' \) | sort)
echo "lint: $clang_format over ${#sources[@]} files"
if ! "$clang_format" --dry-run --Werror "${sources[@]}"; then
  echo "lint: clang-format: the files above are not formatted (clang-format -i FILE)" >&2
  exit 1
fi

mapfile -t units < <(find src -type f -name '*.cc' | sort)
echo "lint: $clang_tidy over ${#units[@]} files, $jobs at a time"
if ! printf '%s\n' "${units[@]}" |
    xargs -P "$jobs" -n 4 "$clang_tidy" -p "$build_dir" --quiet 2>/dev/null; then
  echo "lint: clang-tidy found the problems above (.clang-tidy says which checks run and why)" >&2
  exit 1
fi
echo "lint: clean"
