# KAPITSA_OPS_ONLY: the libraries the op tests need (base, tensor, ops with its cpu and composed parts)
# and tests/ops, with nothing but a C++ compiler for the target and the host's header-only sources —
# the AArch64 cross build (scripts/test-aarch64.sh, cmake/aarch64-linux-gnu.cmake) needs no arm64
# packages: fmt header-only (FMT_HEADER_ONLY), nlohmann/json, and GoogleTest built from Debian's source
# (googletest: /usr/src/googletest). The host headers are reached through a folder of links in the
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
add_library(kapitsa_fmt_header_only INTERFACE)
target_include_directories(kapitsa_fmt_header_only SYSTEM INTERFACE ${host_headers})
target_compile_definitions(kapitsa_fmt_header_only INTERFACE FMT_HEADER_ONLY)
add_library(fmt::fmt ALIAS kapitsa_fmt_header_only)
add_library(nlohmann_json::nlohmann_json ALIAS kapitsa_fmt_header_only)  # the same folder of links

if(KAPITSA_TESTS)
  if(NOT EXISTS ${KAPITSA_GTEST_SOURCE}/CMakeLists.txt)
    message(FATAL_ERROR "KAPITSA_OPS_ONLY: no GoogleTest source in ${KAPITSA_GTEST_SOURCE} (apt-get install googletest)")
  endif()
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  add_subdirectory(${KAPITSA_GTEST_SOURCE} ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL SYSTEM)
  if(NOT TARGET GTest::gtest_main)  # GoogleTest 1.11 and later define these aliases themselves
    add_library(GTest::gtest_main ALIAS gtest_main)
    add_library(GTest::gmock ALIAS gmock)
  endif()
endif()
