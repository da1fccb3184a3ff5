// The source of stoke_test_pch (cmake/StokeTesting.cmake): the target exists to build the
// precompiled header every test executable reuses, and compiles nothing of its own.
