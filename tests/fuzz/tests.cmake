# The fuzz targets (tests/<area>/<name>_fuzz.cpp, beside the tests of the area they read): the
# parsers of outside input, each a libFuzzer entry point (LLVMFuzzerTestOneInput) with its seed
# corpus in tests/fuzz/corpus/<name>/. With
# CPATTN_FUZZ (the clang `fuzz` preset, ASan + UBSan) each links libFuzzer and test
# fuzz.<name> fuzzes it for CPATTN_FUZZ_SECONDS (run_fuzzer.sh); in every other build each links
# the replay driver and test fuzz.<name>.corpus runs every corpus input once (the regression
# inputs included). Label `fuzz`.
# fuzz_targets builds every one of them (scripts/test.sh's fuzz stage), so this list is the only
# place that names them.
set(CPATTN_FUZZ_TARGETS train/checkpoint train/settings cli/specs cli/slices cp/plan
    state/call_record state/fingerprint_bytes)
add_custom_target(fuzz_targets)
foreach(target ${CPATTN_FUZZ_TARGETS})
  get_filename_component(name ${target} NAME)
  add_executable(fuzz_${name} ${PROJECT_SOURCE_DIR}/tests/${target}_fuzz.cpp)
  add_dependencies(fuzz_targets fuzz_${name})
  get_filename_component(area ${target} DIRECTORY)
  cpattn_include_root(fuzz_${name} ALL_LAYERS PRIVATE ${area})
  target_include_directories(fuzz_${name} PRIVATE ${CPATTN_ROOT_fuzz_${name}}
                             ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(fuzz_${name} PRIVATE cpattn cpattn_train cpattn_flags)
  set(corpus ${CMAKE_CURRENT_LIST_DIR}/corpus/${name})
  if(CPATTN_FUZZ)
    math(EXPR fuzz_timeout "${CPATTN_FUZZ_SECONDS} + 120")
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
    add_test(NAME fuzz.${name}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_fuzzer.sh $<TARGET_FILE:fuzz_${name}>
                     ${corpus} ${CMAKE_CURRENT_BINARY_DIR}/fuzz/${name} ${CPATTN_FUZZ_SECONDS})
    set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz
                         TIMEOUT ${fuzz_timeout} PASS_REGULAR_EXPRESSION "fuzz: OK: ")
  else()
    target_sources(fuzz_${name} PRIVATE ${CMAKE_CURRENT_LIST_DIR}/replay_main.cpp)
    add_test(NAME fuzz.${name}.corpus COMMAND fuzz_${name} ${corpus})
    set_tests_properties(fuzz.${name}.corpus PROPERTIES LABELS fuzz)
  endif()
endforeach()
target_sources(fuzz_specs PRIVATE ${PROJECT_SOURCE_DIR}/src/cli/docs_spec.cpp)
target_sources(fuzz_slices PRIVATE ${PROJECT_SOURCE_DIR}/src/cli/slices_spec.cpp)
