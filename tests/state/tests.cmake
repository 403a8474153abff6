# No forward state may hide in globals: fail if src/ declares a static or thread_local container
# (the bug class cpattn exists to prevent; DESIGN.md section 6). A line that holds no forward state
# and must be static says why and carries the marker "not-forward-state".
add_test(NAME state.NoGlobalForwardState
         COMMAND bash -c "! grep -R -n -E '^[[:space:]]*(static|thread_local)[[:space:]]+[^()]*(std::vector|std::deque|std::stack|std::map|std::unordered_map|std::list|ForwardResult|Tensor)' ${PROJECT_SOURCE_DIR}/src | grep -v 'not-forward-state'")
set_tests_properties(state.NoGlobalForwardState PROPERTIES LABELS state)
