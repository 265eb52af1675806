# Finds LibTorch, Gloo (through c10d), OpenMPI, and CUDA and NCCL where LibTorch has them. Defines the
# imported targets ddp::torch, ddp::c10d_gloo, ddp::torch_cuda, ddp::c10d_nccl and DDP_HAVE_GLOO / _MPI / _CUDA / _NCCL. Shared with ddpConfig.cmake.
#
# LibTorch is found as every LibTorch user finds it: find_package(Torch), so
# -DCMAKE_PREFIX_PATH=<unpacked LibTorch> or =$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
# picks a LibTorch 2.x, and nothing picks Debian's libtorch-dev (1.13). ddp::torch then takes every
# library from that one LibTorch's folder: TorchConfig's own find_library(torch) and (c10) search the
# system first, so beside Debian's libtorch-dev a wheel's config would link Debian's libtorch.so.
include_guard(GLOBAL)
find_package(Threads REQUIRED)

find_package(Torch CONFIG QUIET)
if(NOT Torch_FOUND)
  message(FATAL_ERROR "ddp: LibTorch not found. Debian's: ./scripts/install-deps.sh (libtorch-dev 1.13). "
                      "A LibTorch 2.x: ./scripts/install-deps.sh --torch 2 (a venv with PyPI's torch), or "
                      "-DCMAKE_PREFIX_PATH=<an unpacked LibTorch> or "
                      "=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)').")
endif()
get_filename_component(DDP_TORCH_PREFIX "${TORCH_INSTALL_PREFIX}" REALPATH)
set(DDP_TORCH_VERSION "${Torch_VERSION}")

# ddp_torch_library(VAR name): lib<name>.so from DDP_TORCH_PREFIX's lib folder, or empty.
function(ddp_torch_library var name)
  set(${var} "" PARENT_SCOPE)
  foreach(dir lib lib/${CMAKE_LIBRARY_ARCHITECTURE} lib64)
    if(EXISTS "${DDP_TORCH_PREFIX}/${dir}/lib${name}.so")
      set(${var} "${DDP_TORCH_PREFIX}/${dir}/lib${name}.so" PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()
ddp_torch_library(DDP_TORCH_LIB torch)
ddp_torch_library(DDP_TORCH_CPU_LIB torch_cpu)
ddp_torch_library(DDP_C10_LIB c10)
set(DDP_TORCH_INCLUDE_DIR "${DDP_TORCH_PREFIX}/include")
if(NOT DDP_TORCH_LIB OR NOT DDP_TORCH_CPU_LIB OR NOT DDP_C10_LIB OR
   NOT EXISTS "${DDP_TORCH_INCLUDE_DIR}/torch/csrc/api/include/torch/types.h")
  message(FATAL_ERROR "ddp: the LibTorch at ${DDP_TORCH_PREFIX} (Torch_DIR=${Torch_DIR}) lacks lib/libtorch.so, "
                      "libtorch_cpu.so, libc10.so or include/torch/csrc/api/include/torch/types.h: "
                      "point CMAKE_PREFIX_PATH at a complete LibTorch")
endif()
# LibTorch 2.x's newer headers refuse anything below C++20 (ATen.h: "C++20 or later ... is required");
# 1.13 and early 2.x build as C++17. The standard travels to consumers with ddp::torch.
set(DDP_CXX_STANDARD 17)
file(STRINGS "${DDP_TORCH_INCLUDE_DIR}/ATen/ATen.h" _needs_cxx20 REGEX "C\\+\\+20 or later")
if(_needs_cxx20)
  set(DDP_CXX_STANDARD 20)
endif()
# PyPI's LibTorch exports private copies of libstdc++ functions (libtorch_cpu.so: 142 std::filesystem ones;
# 2.11's libtorch.so: 64 more, which crash in remove_all). A binary that lists libtorch*.so before
# libstdc++.so.6 binds to those copies, so ddp::torch links libstdc++ first (test_link_order checks it).
include(CheckCXXSourceCompiles)
check_cxx_source_compiles("#include <cstddef>\n#ifndef __GLIBCXX__\n#error not libstdc++\n#endif\nint main() {}"
                          DDP_LIBSTDCXX)
set(DDP_STDCXX_FIRST "")
if(DDP_LIBSTDCXX)
  set(DDP_STDCXX_FIRST stdc++)
endif()
if(NOT TARGET ddp::torch)
  add_library(ddp::torch INTERFACE IMPORTED)
  set_target_properties(ddp::torch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${DDP_TORCH_INCLUDE_DIR};${DDP_TORCH_INCLUDE_DIR}/torch/csrc/api/include"
    INTERFACE_LINK_LIBRARIES "${DDP_STDCXX_FIRST};${DDP_TORCH_LIB};${DDP_TORCH_CPU_LIB};${DDP_C10_LIB};Threads::Threads"
    INTERFACE_COMPILE_FEATURES cxx_std_${DDP_CXX_STANDARD})
  if(TORCH_CXX_FLAGS)  # e.g. -D_GLIBCXX_USE_CXX11_ABI=0 in older LibTorch builds
    separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
    set_property(TARGET ddp::torch PROPERTY INTERFACE_COMPILE_OPTIONS ${_torch_flags})
  endif()
endif()

# Gloo through c10d. Debian's libtorch links Debian's libgloo.so, so ddp links it too. A LibTorch 2.x
# carries its gloo inside libtorch_cpu.so and ships no gloo headers: ddp compiles c10d's
# ProcessGroupGloo.hpp with Debian's gloo headers (declarations only) and links no libgloo.so, so one
# gloo is in the process. docs/backends.md says why that is safe; test gloo_symbols_from_libtorch checks it.
set(DDP_HAVE_GLOO OFF)
set(DDP_GLOO_INSIDE_TORCH OFF)
if(DDP_WITH_GLOO)
  find_path(DDP_GLOO_INCLUDE_DIR gloo/algorithm.h)
  include(CMakeFindBinUtils)
  execute_process(COMMAND ${CMAKE_READELF} -d "${DDP_TORCH_CPU_LIB}" OUTPUT_VARIABLE _torch_dynamic ERROR_QUIET)
  if(_torch_dynamic MATCHES "NEEDED[^\n]*libgloo")
    find_library(DDP_GLOO_LIB gloo)
  else()
    set(DDP_GLOO_INSIDE_TORCH ON)
  endif()
  if(DDP_GLOO_INCLUDE_DIR AND (DDP_GLOO_LIB OR DDP_GLOO_INSIDE_TORCH) AND
     EXISTS "${DDP_TORCH_INCLUDE_DIR}/torch/csrc/distributed/c10d/ProcessGroupGloo.hpp")
    set(DDP_HAVE_GLOO ON)
    if(NOT TARGET ddp::c10d_gloo)
      add_library(ddp::c10d_gloo INTERFACE IMPORTED)
      set_target_properties(ddp::c10d_gloo PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${DDP_GLOO_INCLUDE_DIR}"
        INTERFACE_COMPILE_DEFINITIONS "USE_C10D_GLOO")
      if(NOT DDP_GLOO_INSIDE_TORCH)
        set_property(TARGET ddp::c10d_gloo PROPERTY INTERFACE_LINK_LIBRARIES "${DDP_GLOO_LIB}")
      endif()
    endif()
  else()
    message(STATUS "ddp: Gloo backend disabled (need libgloo-dev's headers and c10d's ProcessGroupGloo.hpp)")
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

# CUDA and NCCL inside LibTorch (PyPI's default torch wheel, LibTorch's cu* builds). ddp::torch_cuda links
# libtorch_cuda.so and libc10_cuda.so and gives the CUDA runtime's headers; ddp::c10d_nccl adds NCCL's header
# for c10d's ProcessGroupNCCL.hpp. Headers: the wheel's own (site-packages/nvidia/*/include, the versions its
# libraries are), else CUDA's toolkit. Nothing else of ddp names CUDA: device code is c10's device-generic API.
set(DDP_HAVE_CUDA OFF)
set(DDP_HAVE_NCCL OFF)
if(DDP_WITH_CUDA)
  ddp_torch_library(DDP_TORCH_CUDA_LIB torch_cuda)
  ddp_torch_library(DDP_C10_CUDA_LIB c10_cuda)
  if(DDP_TORCH_CUDA_LIB AND DDP_C10_CUDA_LIB)
    file(GLOB _nv_includes "${DDP_TORCH_PREFIX}/../nvidia/*/include")
    find_package(CUDAToolkit QUIET)
    find_path(DDP_CUDA_INCLUDE_DIR cuda_runtime_api.h HINTS ${_nv_includes} ${CUDAToolkit_INCLUDE_DIRS} NO_CACHE)
    find_path(DDP_NCCL_INCLUDE_DIR nccl.h HINTS ${_nv_includes} ${CUDAToolkit_INCLUDE_DIRS} NO_CACHE)
  endif()
  if(DDP_CUDA_INCLUDE_DIR)
    set(DDP_HAVE_CUDA ON)
    set(DDP_CUDA_INCLUDE_DIR_NOTE " (headers: ${DDP_CUDA_INCLUDE_DIR})")
    if(NOT TARGET ddp::torch_cuda)
      add_library(ddp::torch_cuda INTERFACE IMPORTED)
      set_target_properties(ddp::torch_cuda PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${DDP_CUDA_INCLUDE_DIR}"
        INTERFACE_LINK_LIBRARIES "ddp::torch;${DDP_TORCH_CUDA_LIB};${DDP_C10_CUDA_LIB}"
        INTERFACE_COMPILE_OPTIONS "-Wno-interference-size")  # c10/cuda/CUDAEvent.h's alignas
    endif()
    if(NOT DDP_WITH_NCCL)
      message(STATUS "ddp: NCCL backend disabled (-DDDP_WITH_NCCL=OFF)")
    elseif(DDP_NCCL_INCLUDE_DIR AND EXISTS "${DDP_TORCH_INCLUDE_DIR}/torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp")
      set(DDP_HAVE_NCCL ON)
      if(NOT TARGET ddp::c10d_nccl)
        add_library(ddp::c10d_nccl INTERFACE IMPORTED)
        set_target_properties(ddp::c10d_nccl PROPERTIES
          INTERFACE_INCLUDE_DIRECTORIES "${DDP_NCCL_INCLUDE_DIR}"
          INTERFACE_LINK_LIBRARIES ddp::torch_cuda
          INTERFACE_COMPILE_DEFINITIONS "USE_C10D_NCCL")
      endif()
    else()
      message(STATUS "ddp: NCCL backend disabled (need nccl.h and c10d's ProcessGroupNCCL.hpp)")
    endif()
  elseif(DDP_TORCH_CUDA_LIB)
    message(STATUS "ddp: CUDA parts disabled: LibTorch has CUDA, but no cuda_runtime_api.h was found "
                   "(CUDA's toolkit, or the wheel's nvidia-cuda-runtime)")
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
if(DDP_HAVE_NCCL)
  list(APPEND DDP_BACKENDS_LIST nccl)
endif()
