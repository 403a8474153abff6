# The Python package's pytest suites, one ctest per file (so ctest -j runs them side by side),
# run by CPATTN_PYTHON (the project's virtual environment) against the package assembled in the
# build tree.
file(GLOB CPATTN_PYTESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/test_*.py)
foreach(t ${CPATTN_PYTESTS})
  get_filename_component(name ${t} NAME_WE)
  add_test(NAME python.${name}
           COMMAND ${CPATTN_PYTHON} -m pytest -q -p no:cacheprovider ${t})
  set_tests_properties(python.${name} PROPERTIES LABELS python TIMEOUT 900
    ENVIRONMENT "PYTHONPATH=${CPATTN_PYTHON_DIR};OMP_NUM_THREADS=1")
endforeach()

# The PyTorch example runs (a few steps on 2 processes, and the math-attention baseline).
add_test(NAME python.example_torch_train
         COMMAND ${CPATTN_PYTHON} ${PROJECT_SOURCE_DIR}/examples/torch_train.py --procs 2
                 --steps 4 --seq 64 --batch 2 --print-every 2)
add_test(NAME python.example_torch_train_math
         COMMAND ${CPATTN_PYTHON} ${PROJECT_SOURCE_DIR}/examples/torch_train.py
                 --attention torch --steps 4 --seq 64 --batch 2 --print-every 2)
set_tests_properties(python.example_torch_train python.example_torch_train_math PROPERTIES
  LABELS python TIMEOUT 300 ENVIRONMENT "PYTHONPATH=${CPATTN_PYTHON_DIR}"
  PASS_REGULAR_EXPRESSION "final loss [0-9.]+ .*live ForwardResults 0")
