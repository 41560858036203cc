"""Compiler options shared by every target (one place, see STYLE.md 14)."""

# Production code: C11, warnings are errors.
C_OPTS = [
    "-std=c11",
    "-D_GNU_SOURCE",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-unused-parameter",
    "-O2",
]

# Tests: C++17 GoogleTest.
CXX_TEST_OPTS = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"]

# OpenMP for CPU kernels (gcc's libgomp).
OMP_COPTS = ["-fopenmp"]
OMP_LINKOPTS = ["-fopenmp"]
