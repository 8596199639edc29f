# KAPITSA_OPS_ONLY: the libraries the op tests need (base, tensor, ops with its cpu and composed parts)
# and tests/ops, with nothing but a C++ compiler for the target and the host's header-only sources —
# the AArch64 cross build (scripts/test-aarch64.sh, cmake/aarch64-linux-gnu.cmake) needs no arm64
# packages: fmt compiled from its headers (fmt_compiled.cpp), nlohmann/json, and GoogleTest built from
# Debian's source (googletest: /usr/src/googletest; not gmock, which tests/ops does not use). The host headers are reached through a folder of links in the
# build tree, not -I/usr/include, which would put the host's C library headers before the target's.
set(KAPITSA_HOST_INCLUDE /usr/include CACHE PATH "Where fmt/ and nlohmann/ headers are (KAPITSA_OPS_ONLY)")
set(KAPITSA_GTEST_SOURCE /usr/src/googletest CACHE PATH "GoogleTest's source tree (KAPITSA_OPS_ONLY)")
set(host_headers ${CMAKE_BINARY_DIR}/host_headers)
file(MAKE_DIRECTORY ${host_headers})
foreach(dir fmt nlohmann)
  if(NOT EXISTS ${KAPITSA_HOST_INCLUDE}/${dir})
    message(FATAL_ERROR "KAPITSA_OPS_ONLY: no ${KAPITSA_HOST_INCLUDE}/${dir} (apt-get install libfmt-dev nlohmann-json3-dev)")
  endif()
  file(CREATE_LINK ${KAPITSA_HOST_INCLUDE}/${dir} ${host_headers}/${dir} SYMBOLIC)
endforeach()
add_library(kapitsa_host_headers INTERFACE)
target_include_directories(kapitsa_host_headers SYSTEM INTERFACE ${host_headers})
add_library(nlohmann_json::nlohmann_json ALIAS kapitsa_host_headers)
# fmt compiled once from its headers (fmt_compiled.cpp), not FMT_HEADER_ONLY in every file.
add_library(kapitsa_fmt STATIC ${CMAKE_CURRENT_LIST_DIR}/fmt_compiled.cpp)
target_link_libraries(kapitsa_fmt PUBLIC kapitsa_host_headers)
add_library(fmt::fmt ALIAS kapitsa_fmt)

if(KAPITSA_TESTS)
  if(NOT EXISTS ${KAPITSA_GTEST_SOURCE}/CMakeLists.txt)
    message(FATAL_ERROR "KAPITSA_OPS_ONLY: no GoogleTest source in ${KAPITSA_GTEST_SOURCE} (apt-get install googletest)")
  endif()
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory(${KAPITSA_GTEST_SOURCE} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL SYSTEM)
  if(NOT TARGET GTest::gtest_main)  # GoogleTest 1.11 and later define it themselves
    add_library(GTest::gtest_main ALIAS gtest_main)
  endif()
  add_library(kapitsa_no_gmock INTERFACE)  # tests/CMakeLists.txt links GTest::gmock for the other folders
  add_library(GTest::gmock ALIAS kapitsa_no_gmock)
endif()
