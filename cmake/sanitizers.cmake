# BRISK_SANITIZE instruments brisk's own code: the targets defined after this file is included
# (src/, tests/, bench/tools). The root CMakeLists includes it after llama.cpp's subdirectory, so
# llama.cpp and ggml keep the normal Release flags: their objects stay ccache hits, their compute
# stays fast, and their own races and UB are not reported as ours.
#
#   address,undefined  AddressSanitizer (with LeakSanitizer) + UndefinedBehaviorSanitizer
#   thread             ThreadSanitizer
#
# Any report is fatal (-fno-sanitize-recover=all), so UB fails the test that hit it. -O1 keeps the
# tests fast enough for their timeouts (as the sanitizers' documentation advises); -g1 (line
# tables) is all a report's stack needs: on openai_server.cpp, ASan+UBSan -O1 -g1 compiles in 41 s
# of CPU against 90 s for -O2 -g, which is what the CI budget feels. The frame pointer gives the
# sanitizers' fast unwinder whole stacks.
set(BRISK_SANITIZE "" CACHE STRING
    "Instrument brisk's own code: address,undefined or thread (empty: no sanitizer)")

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
                      -fno-omit-frame-pointer -O1 -g1)
  add_link_options(${brisk_sanitizer_flags} ${brisk_sanitizer_link_only_flags})
  message(STATUS "brisk's targets: ${brisk_sanitizer_flags} ${brisk_sanitizer_compile_only_flags}")
endif()
