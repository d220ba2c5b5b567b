# toposched_require_registered(<suffix> <registered names>...): every <name><suffix>.cc in the
# calling directory must have been registered (toposched_test, toposched_bench), so that each
# program is linked to the libraries it names instead of a catch-all list.
function(toposched_require_registered suffix)
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*${suffix}.cc)
  file(RELATIVE_PATH dir ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  foreach(source ${sources})
    get_filename_component(name ${source} NAME_WE)
    if(NOT name IN_LIST ARGN)
      message(FATAL_ERROR "${dir}/${name}.cc is not registered in ${dir}/CMakeLists.txt")
    endif()
  endforeach()
endfunction()
