// A binary built for x86-64-v3 (CMake option TOPOSCHED_X86_64_V3) would die of SIGILL on an older
// CPU, somewhere, with no word of why. This runs before main and says it plainly instead. It is
// compiled for baseline x86-64 (src/cli/CMakeLists.txt).
#if defined(TOPOSCHED_NEEDS_X86_64_V3) && defined(__x86_64__)
#include <cstdio>
#include <cstdlib>

namespace {

__attribute__((constructor(101))) void RequireX8664V3() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2") &&
      __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("popcnt")) {
    return;
  }
  std::fputs(
      "toposched: this CPU lacks AVX2/BMI2/PCLMUL (x86-64-v3), which this build requires; rebuild "
      "with cmake -DTOPOSCHED_X86_64_V3=OFF\n",
      stderr);
  std::_Exit(2);
}

}  // namespace
#endif
