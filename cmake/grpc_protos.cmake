# toposched_grpc_protos(<library> <name>...): compiles proto/<name>.proto (our own wire-compatible
# copies of kubelet's gRPC APIs) into a static <library> with protoc and the gRPC plugin. The
# generated code is not ours to warn about, so it builds without our warning flags, and its headers
# are system includes. Every generated file is also a dependency of toposched_generated_sources,
# which scripts/lint.sh builds before clang-tidy reads the files that include them.
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
if(NOT TARGET toposched_generated_sources)
  add_custom_target(toposched_generated_sources)
endif()

function(toposched_grpc_protos library)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/proto)
  file(MAKE_DIRECTORY ${out})
  set(sources)
  set(generated)
  foreach(name ${ARGN})
    set(proto ${PROJECT_SOURCE_DIR}/proto/${name}.proto)
    set(outputs ${out}/${name}.pb.cc ${out}/${name}.pb.h ${out}/${name}.grpc.pb.cc
                ${out}/${name}.grpc.pb.h)
    add_custom_command(
      OUTPUT ${outputs}
      COMMAND protobuf::protoc --proto_path=${PROJECT_SOURCE_DIR}/proto --cpp_out=${out}
              --grpc_out=${out} --plugin=protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin>
              ${proto}
      DEPENDS ${proto} protobuf::protoc gRPC::grpc_cpp_plugin
      COMMENT "protoc ${name}.proto"
      VERBATIM)
    list(APPEND sources ${out}/${name}.pb.cc ${out}/${name}.grpc.pb.cc)
    list(APPEND generated ${outputs})
  endforeach()
  add_custom_target(${library}_generated DEPENDS ${generated})
  add_dependencies(toposched_generated_sources ${library}_generated)
  add_library(${library} STATIC ${sources})
  target_compile_options(${library} PRIVATE -w)
  target_include_directories(${library} SYSTEM PUBLIC ${out})
  target_link_libraries(${library} PUBLIC gRPC::grpc++ protobuf::libprotobuf)
endfunction()
