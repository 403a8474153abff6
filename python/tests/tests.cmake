# The Python package's pytest suites, one ctest per file (so ctest -j runs them side by side),
# run by Debian's interpreter against the package assembled in the build tree.
file(GLOB CPATTN_PYTESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/test_*.py)
foreach(t ${CPATTN_PYTESTS})
  get_filename_component(name ${t} NAME_WE)
  add_test(NAME python.${name}
           COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${t})
  set_tests_properties(python.${name} PROPERTIES LABELS python TIMEOUT 900
    ENVIRONMENT "PYTHONPATH=${CPATTN_PYTHON_DIR};OMP_NUM_THREADS=1")
endforeach()
