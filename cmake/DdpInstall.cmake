include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS ddp ddp_dist ddp_data ddp_parallel ddp_train EXPORT ddpTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
set(_left_out_headers)
if(NOT DDP_WITH_IMAGE_FOLDER)  # an optional part's headers only where it is built
  set(_left_out_headers PATTERN image_decode.h EXCLUDE PATTERN image_folder.h EXCLUDE PATTERN image_transforms.h EXCLUDE)
endif()
install(DIRECTORY include/ddp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} ${_left_out_headers})
install(EXPORT ddpTargets NAMESPACE ddp:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ddp)
# ddpConfig.cmake reports DDP_BACKENDS_LIST (DdpDependencies.cmake) as ddp_BACKENDS.
file(WRITE ${CMAKE_BINARY_DIR}/ddp_backends.txt "ddp backends: ${DDP_BACKENDS_LIST}\n")  # for the install test
configure_package_config_file(cmake/ddpConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/ddpConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ddp)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ddpConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ddpConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/ddpConfigVersion.cmake
  cmake/DdpDependencies.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/ddp)
