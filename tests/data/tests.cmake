# The committed known-answer vectors (tests/data/cpattn_vectors.json) must match what
# tests/data/generate_vectors.py produces: check_vectors.py regenerates them into a temporary file
# and compares (floats within 1e-12 of each tensor's largest magnitude). It needs Debian's
# /usr/bin/python3 with PyTorch and NumPy (python3-torch, python3-numpy); without them the test
# exits 77 and ctest reports it as skipped. Included at the end of tests/CMakeLists.txt.
set(CPATTN_VECTORS_PYTHON /usr/bin/python3 CACHE FILEPATH
    "Python with torch and numpy for data.vectors_match_generator (Debian's by default)")
if(EXISTS ${CPATTN_VECTORS_PYTHON})
  add_test(NAME data.vectors_match_generator
           COMMAND ${CPATTN_VECTORS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_vectors.py)
else()
  set(CPATTN_VECTORS_SKIP_MSG
      "SKIPPED: no ${CPATTN_VECTORS_PYTHON} (install python3, python3-torch, python3-numpy)")
  add_test(NAME data.vectors_match_generator
           COMMAND sh -c "echo '${CPATTN_VECTORS_SKIP_MSG}'; exit 77")
endif()
set_tests_properties(data.vectors_match_generator PROPERTIES LABELS data SKIP_RETURN_CODE 77
                     TIMEOUT 300)
