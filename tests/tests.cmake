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

foreach(t ${MT_TEST_SOURCES})
  get_filename_component(name ${t} NAME_WE)
  if(name MATCHES "golden")
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
  else()
    mt_sh_test(${name} train)
  endif()
endforeach()
