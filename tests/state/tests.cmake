# No forward state may hide in globals: src/ declares no static or thread_local container (the bug
# class cpattn exists to prevent; docs/design.md section 6). The second test proves the check fires
# on a fixture holding the global step stack of ring attention in the wild.
add_test(NAME state.NoGlobalForwardState
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/check_no_global_state.sh ${PROJECT_SOURCE_DIR}/src)
add_test(NAME state.NoGlobalForwardStateCheckFires
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/check_no_global_state.sh
                 ${CMAKE_CURRENT_LIST_DIR}/global_state_fixture)
set_tests_properties(state.NoGlobalForwardState state.NoGlobalForwardStateCheckFires PROPERTIES
                     LABELS state)
set_tests_properties(state.NoGlobalForwardStateCheckFires PROPERTIES
                     PASS_REGULAR_EXPRESSION "leaky_stack.cpp:8:.*static std::vector")
