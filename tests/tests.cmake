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
  if(name MATCHES "badinput")
    mt_sh_test(${name} anomaly)
  elseif(name MATCHES "sh_mpi_")
    mt_sh_test(${name} mpi)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT
      "MT_BIN=$<TARGET_FILE:meshtrain>;MT_BUILD=${CMAKE_BINARY_DIR};MT_MPIEXEC=${MPIEXEC_EXECUTABLE}")
  else()
    mt_sh_test(${name} train)
  endif()
endforeach()
