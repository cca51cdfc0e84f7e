# `cmake --install` produces a relocatable package: find_package(stoker [COMPONENTS <layer>...])
# gives stoker::<layer> per layer (core ops nn optim amp data dist diag train) and the umbrella
# stoker::stoker, all in one export set (stokerTargets.cmake).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(STOKER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/stoker)
install(TARGETS stoker_core stoker_util stoker_ops stoker_nn stoker_optim stoker_amp stoker_data
                stoker_dist stoker_diag stoker_train stoker EXPORT stokerTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/stoker DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT stokerTargets NAMESPACE stoker:: DESTINATION ${STOKER_CMAKE_DIR})
configure_package_config_file(cmake/stokerConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/stokerConfig.cmake INSTALL_DESTINATION ${STOKER_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/stokerConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/stokerConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/stokerConfigVersion.cmake
              cmake/FindLMDB.cmake cmake/FindTurboJPEG.cmake cmake/FindNCCL.cmake
              cmake/FindCUDNN.cmake
        DESTINATION ${STOKER_CMAKE_DIR})
