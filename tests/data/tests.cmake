# The committed known-answer vectors (tests/data/cpattn_vectors.json) must match what
# tests/data/generate_vectors.py produces: check_vectors.py regenerates them into a temporary file
# and compares (floats within 1e-12 of each tensor's largest magnitude). It needs a Python with
# PyTorch and NumPy: the project's virtual environment .venv/ (scripts/setup_python.sh); without
# one the test exits 77 and ctest reports it as skipped. Included at the end of tests/CMakeLists.txt.
set(CPATTN_VECTORS_PYTHON ${PROJECT_SOURCE_DIR}/.venv/bin/python CACHE FILEPATH
    "Python with torch and numpy for data.vectors_match_generator (the project's .venv)")
if(EXISTS ${CPATTN_VECTORS_PYTHON})
  add_test(NAME data.vectors_match_generator
           COMMAND ${CPATTN_VECTORS_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_vectors.py)
else()
  set(CPATTN_VECTORS_SKIP_MSG
      "SKIPPED: no ${CPATTN_VECTORS_PYTHON} (scripts/setup_python.sh makes it)")
  add_test(NAME data.vectors_match_generator
           COMMAND sh -c "echo '${CPATTN_VECTORS_SKIP_MSG}'; exit 77")
endif()
set_tests_properties(data.vectors_match_generator PROPERTIES LABELS data SKIP_RETURN_CODE 77
                     TIMEOUT 300)
