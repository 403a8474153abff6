# The layers of the attention library (docs/design.md section 2) and the include roots that make
# the compiler enforce them.
#
# Every layer is an area of src/ with the public headers it owns; a layer may use only the layers
# listed as its dependencies (the list is transitive: everything below it). Each target compiles
# against an include root of its own, a folder of links under ${CMAKE_BINARY_DIR}/include_roots/
# that holds exactly what the target may include:
#   cpattn/<header>  the public headers of the layers it may use (linked one by one),
#   <area>/          the folder src/<area>/ of its own area (its private headers),
#   <area>/<header>  single interface headers of an internal target (verify, train).
# A file of a lower layer that includes a higher layer's header, or any other area's private
# header, therefore fails to compile: "No such file or directory". Nothing else puts include/ or
# src/ on a library target's include path.

set(CPATTN_LAYERS core rng kernel comm cp state)
set(CPATTN_LAYER_core_DEPS)
set(CPATTN_LAYER_rng_DEPS core)
set(CPATTN_LAYER_kernel_DEPS core rng)
set(CPATTN_LAYER_comm_DEPS core)
set(CPATTN_LAYER_cp_DEPS core rng kernel comm)
set(CPATTN_LAYER_state_DEPS core rng kernel comm cp)

# The public headers (include/cpattn/) by owning layer; version.h is generated into the build tree.
set(CPATTN_LAYER_core_HEADERS digest.h dtype.h error.h memory.h source_location.h stopwatch.h
    tensor.h version.h)
set(CPATTN_LAYER_rng_HEADERS generator.h rng.h)
set(CPATTN_LAYER_kernel_HEADERS isa.h kernel.h mask.h params.h varlen.h)
set(CPATTN_LAYER_comm_HEADERS backend.h communicator.h mpi_communicator.h thread_communicator.h)
set(CPATTN_LAYER_cp_HEADERS cp_options.h detail/cp.h layout.h plan.h strategy.h workspace.h)
set(CPATTN_LAYER_state_HEADERS attention.h fingerprint.h recompute.h)

# Every header in include/cpattn/ belongs to exactly one layer.
file(GLOB_RECURSE cpattn_public_headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}/include/cpattn
     ${PROJECT_SOURCE_DIR}/include/cpattn/*.h ${PROJECT_SOURCE_DIR}/include/cpattn/*.h.in)
list(TRANSFORM cpattn_public_headers REPLACE "\\.in$" "")
set(cpattn_listed_headers)
foreach(layer ${CPATTN_LAYERS})
  list(APPEND cpattn_listed_headers ${CPATTN_LAYER_${layer}_HEADERS})
endforeach()
list(SORT cpattn_public_headers)
list(SORT cpattn_listed_headers)
if(NOT cpattn_public_headers STREQUAL cpattn_listed_headers)
  message(FATAL_ERROR "cmake/layers.cmake: the layers' header lists (${cpattn_listed_headers}) "
                      "differ from include/cpattn/ (${cpattn_public_headers})")
endif()

# cpattn_include_root(<name> [LAYERS <layer>...] [ALL_LAYERS] [PRIVATE <area>]
#                     [INTERFACE <area/header>...])
# Makes the include root <name> and sets CPATTN_ROOT_<name> to its folder.
function(cpattn_include_root name)
  cmake_parse_arguments(ARG "ALL_LAYERS" "PRIVATE" "LAYERS;INTERFACE" ${ARGN})
  if(ARG_ALL_LAYERS)
    set(ARG_LAYERS ${CPATTN_LAYERS})
  endif()
  set(root ${CMAKE_BINARY_DIR}/include_roots/${name})
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root}/cpattn/detail)
  foreach(layer ${ARG_LAYERS})
    foreach(header ${CPATTN_LAYER_${layer}_HEADERS})
      if(header STREQUAL "version.h")
        set(target ${PROJECT_BINARY_DIR}/include/cpattn/version.h)
      else()
        set(target ${PROJECT_SOURCE_DIR}/include/cpattn/${header})
      endif()
      file(CREATE_LINK ${target} ${root}/cpattn/${header} SYMBOLIC)
    endforeach()
  endforeach()
  if(ARG_PRIVATE)
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${ARG_PRIVATE} ${root}/${ARG_PRIVATE} SYMBOLIC)
  endif()
  foreach(header ${ARG_INTERFACE})
    get_filename_component(dir ${header} DIRECTORY)
    file(MAKE_DIRECTORY ${root}/${dir})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${header} ${root}/${header} SYMBOLIC)
  endforeach()
  set(CPATTN_ROOT_${name} ${root} PARENT_SCOPE)
endfunction()

# The root of each layer: its own and its dependencies' public headers, its own private ones.
foreach(layer ${CPATTN_LAYERS})
  cpattn_include_root(${layer} LAYERS ${layer} ${CPATTN_LAYER_${layer}_DEPS} PRIVATE ${layer})
endforeach()
