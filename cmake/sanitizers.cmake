# BRISK_SANITIZE instruments brisk's own code: the targets defined after this file is included
# (src/, tests/, bench/tools). The root CMakeLists includes it after llama.cpp's subdirectory, so
# llama.cpp and ggml keep the normal Release flags: their objects stay ccache hits, their compute
# stays fast, and their own races and UB are not reported as ours.
#
#   address,undefined  AddressSanitizer (with LeakSanitizer) + UndefinedBehaviorSanitizer
#   thread             ThreadSanitizer
#
# Any report is fatal (-fno-sanitize-recover=all), so UB fails the test that hit it. -O1 (the
# default of BRISK_SANITIZE_OPT) keeps the integration tests fast enough for their timeouts (as
# the sanitizers' documentation advises); -g1 (line tables) is all a report's stack needs. The
# frame pointer gives the sanitizers' fast unwinder whole stacks.
#
# The unit tests' build (`make sanitize-unit`, part of `make test`) uses -O0: it finds everything
# -O1 finds (no access is optimised away), and on the 2-core CI machine compiling is what costs.
# openai_server.cpp with ASan+UBSan, 2026-12-03: -O1 -g1 69 s, -O0 -g1 29 s, plain -O2 25 s.
# The few files whose loops the unit tests spend their time in keep -O1 even then
# (brisk_sanitize_hot_sources, called once every target exists): at -O0 the unit tests took 219 s
# instead of 63 s, nearly all of it in the sampler's distribution tests, random-gguf's writer and
# the planner's simulation.
set(BRISK_SANITIZE "" CACHE STRING
    "Instrument brisk's own code: address,undefined or thread (empty: no sanitizer)")
set(BRISK_SANITIZE_OPT 1 CACHE STRING "Optimisation level of the sanitized code (0 or 1)")

if(BRISK_SANITIZE)
  if(BRISK_SANITIZE STREQUAL "address,undefined")
    # float-cast-overflow is UB that -fsanitize=undefined leaves out in GCC: a double out of an
    # int's range (a JSON number, an infinite rate) converted to int. _GLIBCXX_ASSERTIONS adds
    # the bounds checks ASan cannot make (operator[] past size() but inside capacity(), front()
    # of an empty vector).
    set(brisk_sanitizer_flags -fsanitize=address,undefined,float-cast-overflow
        -fno-sanitize-recover=all)
    set(brisk_sanitizer_compile_only_flags -D_GLIBCXX_ASSERTIONS)
    # With GCC 12's shared libubsan beside libasan, UBSan ignores log_path (ASAN_OPTIONS and
    # UBSAN_OPTIONS alike) and writes to stderr only, where a test that captures a subprocess's
    # output loses it. Linked statically, UBSan honours UBSAN_OPTIONS=log_path, which
    # tests/integration/sanitizer_reports.py relies on.
    set(brisk_sanitizer_link_only_flags -static-libubsan)
  elseif(BRISK_SANITIZE STREQUAL "thread")
    set(brisk_sanitizer_flags -fsanitize=thread)
    set(brisk_sanitizer_compile_only_flags)
    set(brisk_sanitizer_link_only_flags)
  else()
    message(FATAL_ERROR
            "BRISK_SANITIZE=${BRISK_SANITIZE}: use address,undefined or thread (ThreadSanitizer "
            "cannot run beside AddressSanitizer)")
  endif()
  add_compile_options(${brisk_sanitizer_flags} ${brisk_sanitizer_compile_only_flags}
                      -fno-omit-frame-pointer -O${BRISK_SANITIZE_OPT} -g1)
  add_link_options(${brisk_sanitizer_flags} ${brisk_sanitizer_link_only_flags})
  message(STATUS "brisk's targets: ${brisk_sanitizer_flags} ${brisk_sanitizer_compile_only_flags}")
endif()

# The hot loops of the unit tests: compiled at -O1 even when BRISK_SANITIZE_OPT is 0 (see above).
# A source file's options come after the target's, so its -O1 is the one the compiler keeps.
function(brisk_sanitize_hot_sources)
  if(NOT BRISK_SANITIZE OR NOT BRISK_SANITIZE_OPT STREQUAL "0")
    return()
  endif()
  set(root ${PROJECT_SOURCE_DIR})
  set_property(SOURCE
      ${root}/src/engine/sampler.cpp ${root}/src/engine/logit_kernels.cpp
      ${root}/src/plan/queueing_model.cpp ${root}/src/plan/performance_model.cpp
      ${root}/src/plan/capacity_planner.cpp
      DIRECTORY ${root}/src APPEND PROPERTY COMPILE_OPTIONS -O1)
  if(BRISK_BUILD_TESTS)
    set_property(SOURCE ${root}/tests/unit/sampler_test.cpp
        DIRECTORY ${root}/tests/unit APPEND PROPERTY COMPILE_OPTIONS -O1)
  endif()
  if(BRISK_LLAMA_SOURCE_DIR)
    set_property(SOURCE ${root}/bench/tools/random_gguf_writer.cpp
        DIRECTORY ${root}/bench/tools APPEND PROPERTY COMPILE_OPTIONS -O1)
  endif()
endfunction()
