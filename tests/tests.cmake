# The test list.  C tests run from the source tree; shell tests get the binary in MT_BIN.
# Labels: unit (pure, fast), golden (against PyTorch), anomaly (bad input, faults),
# train (short training runs through the command line).
function(mt_c_test name label)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS ${label} TIMEOUT 600)
endfunction()
function(mt_sh_test name label)
  add_test(NAME ${name} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/${name}.sh
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES LABELS ${label} TIMEOUT 900
                       ENVIRONMENT "MT_BIN=$<TARGET_FILE:meshtrain>")
endfunction()

# Multi-rank tests run under mpiexec.  Machine quirks live here, not in the code: root
# needs Open MPI's consent, more ranks than cores need --oversubscribe, and the single-
# copy mechanism is slow in this kind of VM (see docs/design.md).
set(MT_MPIEXEC ${MPIEXEC_EXECUTABLE} --oversubscribe --mca btl_vader_single_copy_mechanism none)
set(MT_MPI_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
function(mt_mpi_test name ranks)
  add_test(NAME ${name}_np${ranks} COMMAND ${MT_MPIEXEC} -n ${ranks} $<TARGET_FILE:${name}>
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(${name}_np${ranks} PROPERTIES LABELS mpi TIMEOUT 300 ENVIRONMENT "${MT_MPI_ENV}")
endfunction()

foreach(t ${MT_TEST_SOURCES})
  get_filename_component(name ${t} NAME_WE)
  if(name MATCHES "^test_mpi_")
    foreach(np 1 2 3 4 8)
      mt_mpi_test(${name} ${np})
    endforeach()
  elseif(name MATCHES "^test_engine_mpi")  # the layouts of 2 and of 4 ranks
    foreach(np 2 4)
      mt_mpi_test(${name} ${np})
    endforeach()
  elseif(name MATCHES "golden")
    mt_c_test(${name} golden)
  elseif(name MATCHES "safetensors|faults")
    mt_c_test(${name} anomaly)
  else()
    mt_c_test(${name} unit)
  endif()
endforeach()

file(GLOB MT_SH_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/sh_*.sh)
foreach(t ${MT_SH_TESTS})
  get_filename_component(name ${t} NAME_WE)
  if(name MATCHES "help|layers")
    mt_sh_test(${name} unit)
  elseif(name MATCHES "badinput|hardening")
    mt_sh_test(${name} anomaly)
  elseif(name MATCHES "sh_mpi_")
    mt_sh_test(${name} mpi)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT
      "MT_BIN=$<TARGET_FILE:meshtrain>;MT_BUILD=${CMAKE_BINARY_DIR};MT_MPIEXEC=${MPIEXEC_EXECUTABLE}")
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)  # sh_mpi_hosts where namespaces cannot be made
  elseif(name MATCHES "sh_plan")
    mt_sh_test(${name} unit)
  elseif(name MATCHES "tokenizer")
    mt_sh_test(${name} unit)
    set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77)  # sh_tokenizer_gpt2 without its set-up
  else()
    mt_sh_test(${name} train)
  endif()
endforeach()

# every fuzz target replays its committed corpus (every past finding stays fixed)
foreach(src ${MT_FUZZ_SOURCES})
  get_filename_component(name ${src} NAME_WE)
  string(REPLACE "fuzz_" "" corpus ${name})
  if(NOT MT_FUZZ)
    add_test(NAME ${name}_replay COMMAND ${name}_replay ${CMAKE_SOURCE_DIR}/fuzz/corpus/${corpus}
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(${name}_replay PROPERTIES LABELS anomaly TIMEOUT 300)
  endif()
endforeach()

# ---- the sanitizer build (-DMT_SANITIZE=ON, scripts/test_sanitize.sh): the C tests that need
# no MPI, and a short single-rank train / eval / sample with bad inputs, labelled "sanitize",
# with leak detection on.  The multi-rank tests are not run under the sanitizers.
if(MT_SANITIZE)
  set(MT_SAN_ENV "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1"
      "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
      "LSAN_OPTIONS=suppressions=${CMAKE_SOURCE_DIR}/tests/lsan.supp:print_suppressions=0"
      "MT_BIN=$<TARGET_FILE:meshtrain>")
  foreach(t ${MT_TEST_SOURCES})
    get_filename_component(name ${t} NAME_WE)
    if(NOT name MATCHES "^test_mpi_|^test_engine_mpi")
      set_tests_properties(${name} PROPERTIES LABELS sanitize ENVIRONMENT "${MT_SAN_ENV}")
    endif()
  endforeach()
  foreach(src ${MT_FUZZ_SOURCES})
    get_filename_component(name ${src} NAME_WE)
    if(NOT MT_FUZZ)
      set_tests_properties(${name}_replay PROPERTIES LABELS sanitize ENVIRONMENT "${MT_SAN_ENV}")
    endif()
  endforeach()
  add_test(NAME san_cli COMMAND bash ${CMAKE_SOURCE_DIR}/tests/san_cli.sh WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(san_cli PROPERTIES LABELS sanitize TIMEOUT 900 ENVIRONMENT "${MT_SAN_ENV}")
endif()
