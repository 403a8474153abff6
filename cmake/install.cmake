# `cmake --install`: headers, libcpattn (+ libcpattn_mpi), the CLI, the CMake package (targets
# cpattn::cpattn and, as component `mpi`, cpattn::mpi) and pkg-config files.
include(CMakePackageConfigHelpers)

set(CPATTN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/cpattn)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/cpattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "mpi_communicator.h" EXCLUDE)
install(FILES ${PROJECT_BINARY_DIR}/include/cpattn/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cpattn)
install(TARGETS cpattn EXPORT cpattnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT cpattnTargets NAMESPACE cpattn:: DESTINATION ${CPATTN_CMAKE_DIR})

if(CPATTN_HAVE_MPI)
  install(FILES ${PROJECT_SOURCE_DIR}/include/cpattn/mpi_communicator.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cpattn)
  install(TARGETS cpattn_mpi EXPORT cpattnMpiTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT cpattnMpiTargets NAMESPACE cpattn:: DESTINATION ${CPATTN_CMAKE_DIR})
endif()

if(CPATTN_BUILD_CLI)
  install(TARGETS cpattn_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# What the package config records about this build (cpattn_NATIVE, cpattn_KERNEL_ISAS,
# cpattn_SHARED).
set(CPATTN_CONFIG_NATIVE OFF)
if(CPATTN_HAS_MARCH_NATIVE)
  set(CPATTN_CONFIG_NATIVE ON)
endif()
set(CPATTN_CONFIG_SHARED OFF)
if(BUILD_SHARED_LIBS)
  set(CPATTN_CONFIG_SHARED ON)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/cpattnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cpattnConfig.cmake INSTALL_DESTINATION ${CPATTN_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cpattnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cpattnConfig.cmake ${PROJECT_BINARY_DIR}/cpattnConfigVersion.cmake
        DESTINATION ${CPATTN_CMAKE_DIR})

# pkg-config: cpattn.pc (the attention library) and, with MPI, cpattn-mpi.pc. Relocatable: the
# prefix is found from the .pc file's own folder, so `cmake --install --prefix P` works for any P.
file(RELATIVE_PATH CPATTN_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" CPATTN_PC_TO_PREFIX "${CPATTN_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/cpattn.pc.in ${PROJECT_BINARY_DIR}/cpattn.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cpattn.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(CPATTN_HAVE_MPI)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/cpattn-mpi.pc.in ${PROJECT_BINARY_DIR}/cpattn-mpi.pc
                 @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/cpattn-mpi.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
