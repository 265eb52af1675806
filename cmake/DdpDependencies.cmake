# Finds LibTorch (Debian's libtorch-dev layout or a LibTorch tree via Torch_ROOT),
# Gloo (through c10d) and OpenMPI. Defines the imported targets ddp::torch and ddp::c10d_gloo
# and DDP_HAVE_GLOO / DDP_HAVE_MPI. Shared with ddpConfig.cmake.
include_guard(GLOBAL)
find_package(Threads REQUIRED)

find_path(DDP_TORCH_INCLUDE_DIR torch/csrc/api/include/torch/types.h
  HINTS ${Torch_ROOT}/include $ENV{Torch_ROOT}/include PATH_SUFFIXES include)
find_library(DDP_TORCH_CPU_LIB torch_cpu HINTS ${Torch_ROOT}/lib $ENV{Torch_ROOT}/lib)
find_library(DDP_TORCH_LIB torch HINTS ${Torch_ROOT}/lib $ENV{Torch_ROOT}/lib)
find_library(DDP_C10_LIB c10 HINTS ${Torch_ROOT}/lib $ENV{Torch_ROOT}/lib)
if(NOT DDP_TORCH_INCLUDE_DIR OR NOT DDP_TORCH_CPU_LIB OR NOT DDP_C10_LIB)
  message(FATAL_ERROR "LibTorch not found: install libtorch-dev (./scripts/install-deps.sh) "
                      "or point Torch_ROOT at an unpacked LibTorch")
endif()
if(NOT TARGET ddp::torch)
  add_library(ddp::torch INTERFACE IMPORTED)
  set_target_properties(ddp::torch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${DDP_TORCH_INCLUDE_DIR};${DDP_TORCH_INCLUDE_DIR}/torch/csrc/api/include"
    INTERFACE_LINK_LIBRARIES "${DDP_TORCH_LIB};${DDP_TORCH_CPU_LIB};${DDP_C10_LIB};Threads::Threads")
endif()

set(DDP_HAVE_GLOO OFF)
if(DDP_WITH_GLOO)
  find_path(DDP_GLOO_INCLUDE_DIR gloo/algorithm.h)
  find_library(DDP_GLOO_LIB gloo)
  if(DDP_GLOO_INCLUDE_DIR AND DDP_GLOO_LIB AND
     EXISTS "${DDP_TORCH_INCLUDE_DIR}/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp")
    set(DDP_HAVE_GLOO ON)
    if(NOT TARGET ddp::c10d_gloo)
      add_library(ddp::c10d_gloo INTERFACE IMPORTED)
      set_target_properties(ddp::c10d_gloo PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${DDP_GLOO_INCLUDE_DIR}"
        INTERFACE_COMPILE_DEFINITIONS "USE_C10D_GLOO"
        INTERFACE_LINK_LIBRARIES "${DDP_GLOO_LIB}")
    endif()
  else()
    message(STATUS "ddp: Gloo backend disabled (need libgloo-dev and c10d's ProcessGroupGloo.hpp)")
  endif()
endif()

set(DDP_HAVE_MPI OFF)
if(DDP_WITH_MPI)
  enable_language(C)  # FindMPI needs it for the C component
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(DDP_HAVE_MPI ON)
  else()
    message(STATUS "ddp: MPI backend disabled (need libopenmpi-dev)")
  endif()
endif()

# The process-group backends this build has, in the order ddp_BACKENDS lists them.
set(DDP_BACKENDS_LIST local)
if(DDP_HAVE_GLOO)
  list(APPEND DDP_BACKENDS_LIST gloo)
endif()
if(DDP_HAVE_MPI)
  list(APPEND DDP_BACKENDS_LIST mpi)
endif()
