# Checks of the build itself: the installed package works for a downstream project (static, and
# as shared libraries), the layer rule holds, and the sources are clang-formatted.
if(CPATTN_HAVE_MPI)
  string(JOIN " " CPATTN_MPIRUN_LINE ${CPATTN_MPIRUN})
endif()
# A sanitizer build's library needs the sanitizer runtime in every program that links it, which a
# downstream project does not have: the consumer tests run on normal builds only.
if(NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize")
add_test(NAME build.consumer_static
         COMMAND ${CMAKE_COMMAND} -E env "MPIRUN=${CPATTN_MPIRUN_LINE}"
                 ${CMAKE_CURRENT_LIST_DIR}/../consumer/run.sh ${CMAKE_BINARY_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/consumer_static)
add_test(NAME build.consumer_shared
         COMMAND ${CMAKE_COMMAND} -E env "MPIRUN=${CPATTN_MPIRUN_LINE}"
                 ${CMAKE_CURRENT_LIST_DIR}/../consumer/run.sh --shared ${PROJECT_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/consumer_shared)
set_tests_properties(build.consumer_static build.consumer_shared PROPERTIES
  LABELS build TIMEOUT 900 PASS_REGULAR_EXPRESSION "consumer: all ok")
# It builds the library again: its seconds as COST start it early, beside the short tests (see
# python/tests/tests.cmake on COST).
set_tests_properties(build.consumer_shared PROPERTIES COST 158)
endif()

# The layer rule (cmake/layers.cmake): the compiler refuses a header a target may not include.
# Against the kernel layer's include root, a file that includes the kernel's own headers and
# those of the layers below compiles; one that includes a higher layer's public header, or
# another area's private header, does not.
set(CPATTN_LAYER_FIXTURES ${CMAKE_CURRENT_LIST_DIR}/layer_fixture)
set(CPATTN_LAYER_CHECK ${CMAKE_CXX_COMPILER} -std=c++20 -fsyntax-only -I${CPATTN_ROOT_kernel})
add_test(NAME build.layer_rule_control
         COMMAND ${CPATTN_LAYER_CHECK} ${CPATTN_LAYER_FIXTURES}/kernel_uses_its_layers.cpp)
add_test(NAME build.layer_rule_higher_layer
         COMMAND ${CPATTN_LAYER_CHECK} ${CPATTN_LAYER_FIXTURES}/kernel_includes_state.cpp)
add_test(NAME build.layer_rule_private_header
         COMMAND ${CPATTN_LAYER_CHECK} ${CPATTN_LAYER_FIXTURES}/kernel_includes_cp_private.cpp)
set_tests_properties(build.layer_rule_control build.layer_rule_higher_layer
                     build.layer_rule_private_header PROPERTIES LABELS build)
set_tests_properties(build.layer_rule_higher_layer PROPERTIES
                     PASS_REGULAR_EXPRESSION "cpattn/attention.h: No such file")
set_tests_properties(build.layer_rule_private_header PROPERTIES
                     PASS_REGULAR_EXPRESSION "cp/ring_detail.h: No such file")

# The contract document against the build (docs/design.md sections 2, 3 and 5.7): layers, headers,
# subcommands, ISA paths and tag streams; and the check fires on a copy whose layer table misses a
# header, and on one whose ISA paths miss a row of the table.
add_test(NAME build.design_contract
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/check_design.py ${PROJECT_SOURCE_DIR}
                 $<TARGET_FILE:cpattn_cli>)
set_tests_properties(build.design_contract PROPERTIES LABELS build
                     PASS_REGULAR_EXPRESSION ", 0 differences")
# build.design_contract<suffix>: the check on a copy of design.md edited by the sed expression
# `edit` passes only when it reports `expected`.
function(cpattn_design_contract_fires suffix edit expected)
  add_test(NAME build.design_contract${suffix}
           COMMAND sh -c "sed \"$3\" \"$0\"/docs/design.md > \"$2\" && /usr/bin/python3 \"$0\"/tests/build/check_design.py \"$0\" \"$1\" --design \"$2\""
                   ${PROJECT_SOURCE_DIR} $<TARGET_FILE:cpattn_cli>
                   ${CMAKE_CURRENT_BINARY_DIR}/design${suffix}.md "${edit}")
  set_tests_properties(build.design_contract${suffix} PROPERTIES LABELS build
                       PASS_REGULAR_EXPRESSION "${expected}")
endfunction()
cpattn_design_contract_fires(_fires "s/`plan.h`, //" "include/cpattn/plan.h is in no layer")
cpattn_design_contract_fires(_fires_isa "s/`avx512bf16` (checked/(checked/"
                             "section 3 names paths .*, the ISA table .*avx512bf16")

# Formatting: every C++ source is as clang-format (.clang-format) would write it.
find_program(CPATTN_CLANG_FORMAT clang-format)
if(CPATTN_CLANG_FORMAT)
  file(GLOB_RECURSE CPATTN_FORMATTED_SOURCES CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/include/*.h ${PROJECT_SOURCE_DIR}/src/*.h
       ${PROJECT_SOURCE_DIR}/src/*.cpp ${PROJECT_SOURCE_DIR}/tests/*.h
       ${PROJECT_SOURCE_DIR}/tests/*.cpp ${PROJECT_SOURCE_DIR}/bench/*.h
       ${PROJECT_SOURCE_DIR}/bench/*.cpp ${PROJECT_SOURCE_DIR}/python/*.cpp)
  add_test(NAME build.clang_format
           COMMAND ${CPATTN_CLANG_FORMAT} --dry-run -Werror ${CPATTN_FORMATTED_SOURCES})
  set_tests_properties(build.clang_format PROPERTIES LABELS build)
endif()

# The kernel's per-ISA copies define no symbol another copy or the baseline code could bind to
# (docs/design.md section 3): checked on the object files of each copy.
if(CMAKE_NM)
  foreach(isa ${CPATTN_KERNEL_ISAS})
    add_test(NAME build.isa_symbols_${isa}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/check_isa_symbols.sh ${CMAKE_NM} ${isa}
                     "$<JOIN:$<TARGET_OBJECTS:cpattn_kernel_${isa}>, >")
    set_tests_properties(build.isa_symbols_${isa} PROPERTIES LABELS build
                         PASS_REGULAR_EXPRESSION "every shared symbol is in")
  endforeach()
endif()
if(CMAKE_NM)
  # ... and the check fires on a copy that leaks a std::vector<float> instance.
  add_library(cpattn_isa_symbols_fixture OBJECT
              ${CMAKE_CURRENT_LIST_DIR}/isa_symbols_fixture/leaky_copy.cpp)
  target_compile_options(cpattn_isa_symbols_fixture PRIVATE -mavx2 -mfma)
  set_target_properties(cpattn_isa_symbols_fixture PROPERTIES EXCLUDE_FROM_ALL OFF)
  add_test(NAME build.isa_symbols_check_fires
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/check_isa_symbols.sh ${CMAKE_NM} avx2
                   "$<JOIN:$<TARGET_OBJECTS:cpattn_isa_symbols_fixture>, >")
  set_tests_properties(build.isa_symbols_check_fires PROPERTIES LABELS build
                       PASS_REGULAR_EXPRESSION "std::vector<float.*outside cpattn::detail::avx2")
endif()
