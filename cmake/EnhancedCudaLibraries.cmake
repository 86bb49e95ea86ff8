# Finds the CUDA libraries the backend links (cuDNN, cuBLAS, the CUDA runtime) and NCCL, in the
# system's CUDA paths or, where the system has none, in NVIDIA's Python wheels (nvidia-cudnn-cu13,
# nvidia-nccl-cu13, nvidia-cublas, nvidia-cuda-runtime) in the site-packages of any python3 on the
# PATH. Wheels ship versioned names only (libcudnn.so.9, libcublas.so.13, no libcudnn.so), so every
# search accepts those too. Included by the top-level CMakeLists.txt's CUDA detection block after
# check_language(CUDA); sets:
#   CUDAToolkit_FOUND, the CUDA:: targets   (FindCUDAToolkit, with versioned names seeded)
#   CUDNN_INCLUDE_DIR, CUDNN_LIBRARY        (cache; ENHANCED_CUDNN_ROOT = where they were found)
#   NCCL_INCLUDE_DIR, NCCL_LIBRARY          (cache, optional; ENHANCED_NCCL_ROOT likewise), and
#                                           the target enhanced::nccl when found
#   ENHANCED_CUDA_LIBRARY_DIRS              the folders of those libraries outside the system's
#                                           default search path: the build's rpath gets them

set(ENHANCED_CUDNN_ROOT "" CACHE PATH
    "cuDNN root (include/, lib/); empty: the system's CUDA paths, else a python3's nvidia-cudnn wheel")
set(ENHANCED_NCCL_ROOT "" CACHE PATH
    "NCCL root (include/, lib/); empty: the system's CUDA paths, else a python3's nvidia-nccl wheel")
option(ENHANCED_CUDA_FROM_PYTHON "Look for cuDNN, NCCL and cuBLAS in python3's NVIDIA wheels" ON)
option(ENHANCED_CUDA_RPATH "Put the folders of cuDNN, NCCL and cuBLAS on the binaries' rpath" ON)

# The nvidia/ folders of the sys.path entries (site-packages, user site, PYTHONPATH) of every
# python3 on the PATH, in PATH order. Not deduplicated by interpreter: a venv's python3 is a link
# to the base interpreter but has its own site-packages.
function(enhanced_python_nvidia_dirs out)
  set(found)
  if(ENHANCED_CUDA_FROM_PYTHON)
    string(REPLACE ":" ";" path_entries "$ENV{PATH}")
    foreach(entry IN LISTS path_entries)
      if(entry STREQUAL "" OR NOT EXISTS "${entry}/python3" OR IS_DIRECTORY "${entry}/python3")
        continue()
      endif()
      execute_process(
        COMMAND "${entry}/python3" -c
                "import os, sys; print(';'.join(os.path.join(p, 'nvidia') for p in sys.path if p and os.path.isdir(os.path.join(p, 'nvidia'))))"
        OUTPUT_VARIABLE dirs OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET TIMEOUT 30)
      foreach(dir IN LISTS dirs)
        file(REAL_PATH "${dir}" dir)
        list(APPEND found "${dir}")
      endforeach()
    endforeach()
    list(REMOVE_DUPLICATES found)
  endif()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# enhanced_find_cuda_package(<PREFIX> <ROOT_VAR> <header> <wheel folder> <library names...>)
# finds <PREFIX>_INCLUDE_DIR and <PREFIX>_LIBRARY together in one root: <ROOT_VAR> when it is set
# (and nowhere else), else the system paths, else each python3's nvidia/<wheel folder>. Sets
# <ROOT_VAR> in the cache to the root it used, and redoes the search when <ROOT_VAR> changes.
function(enhanced_find_cuda_package prefix root_var header wheel)
  set(names ${ARGN})
  set(inc ${prefix}_INCLUDE_DIR)
  set(lib ${prefix}_LIBRARY)
  if(NOT "${${root_var}}" STREQUAL "${_${root_var}_USED}")
    unset(${inc} CACHE)
    unset(${lib} CACHE)
  endif()
  if(${inc} AND ${lib})
    return()  # cached from an earlier configure with the same root
  endif()
  if(${root_var})
    find_path(${inc} ${header} PATHS "${${root_var}}" PATH_SUFFIXES include NO_DEFAULT_PATH)
    find_library(${lib} NAMES ${names} PATHS "${${root_var}}" PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
    set(root "${${root_var}}")
  else()
    find_path(${inc} ${header} HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    find_library(${lib} NAMES ${names} HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/local/cuda/lib)
    if(${inc} AND ${lib})
      get_filename_component(root "${${inc}}" DIRECTORY)
    else()
      enhanced_python_nvidia_dirs(nvidia_dirs)
      foreach(dir IN LISTS nvidia_dirs)
        unset(${inc} CACHE)
        unset(${lib} CACHE)
        set(root "${dir}/${wheel}")
        find_path(${inc} ${header} PATHS "${root}/include" NO_DEFAULT_PATH)
        find_library(${lib} NAMES ${names} PATHS "${root}/lib" NO_DEFAULT_PATH)
        if(${inc} AND ${lib})
          break()
        endif()
      endforeach()
    endif()
  endif()
  if(${inc} AND ${lib})
    if(NOT ${root_var})
      get_property(doc CACHE ${root_var} PROPERTY HELPSTRING)
      set(${root_var} "${root}" CACHE PATH "${doc}" FORCE)
    endif()
    set(_${root_var}_USED "${${root_var}}" CACHE INTERNAL "")
  endif()
endfunction()

# ---- the CUDA toolkit (cudart, cuBLAS) ----
# FindCUDAToolkit looks for libcudart.so and libcublas.so, unversioned. A toolkit made of the
# wheels (nvcc in site-packages/nvidia/cu13/bin) has only libcudart.so.13 and libcublas.so.13:
# then seed its cache variables with the versioned files, from the toolkit's own lib folder or a
# wheel's, and ask again (it creates only the targets that do not exist yet).
find_package(CUDAToolkit QUIET)
if(CMAKE_CUDA_COMPILER AND (NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cudart OR NOT TARGET CUDA::cublas))
  get_filename_component(_enhanced_nvcc_dir "${CMAKE_CUDA_COMPILER}" REALPATH)
  get_filename_component(_enhanced_nvcc_dir "${_enhanced_nvcc_dir}" DIRECTORY)
  enhanced_python_nvidia_dirs(_enhanced_nvidia_dirs)
  set(_enhanced_toolkit_libs "${_enhanced_nvcc_dir}/../lib64" "${_enhanced_nvcc_dir}/../lib")
  foreach(dir IN LISTS _enhanced_nvidia_dirs)
    list(APPEND _enhanced_toolkit_libs "${dir}/cu13/lib" "${dir}/cuda_runtime/lib" "${dir}/cublas/lib")
  endforeach()
  # CUDA_CUDART decides CUDAToolkit_FOUND; CUDA_<name>_LIBRARY makes the CUDA::<name> target.
  foreach(pair "CUDA_CUDART;cudart" "CUDA_cudart_LIBRARY;cudart" "CUDA_cublas_LIBRARY;cublas"
               "CUDA_cublasLt_LIBRARY;cublasLt")
    list(GET pair 0 var)
    list(GET pair 1 name)
    find_library(${var} NAMES ${name} lib${name}.so.13 lib${name}.so.12 HINTS ${_enhanced_toolkit_libs})
  endforeach()
  find_package(CUDAToolkit QUIET)
  # The wheel's headers sit beside its libraries (nvidia/cu13/include).
  foreach(lib cublas cublasLt)
    if(TARGET CUDA::${lib})
      get_filename_component(dir "${CUDA_${lib}_LIBRARY}" DIRECTORY)
      if(EXISTS "${dir}/../include/cublas_v2.h")
        target_include_directories(CUDA::${lib} SYSTEM INTERFACE "${dir}/../include")
      endif()
    endif()
  endforeach()
endif()

# ---- cuDNN (required by the backend) and NCCL (optional: the CUDA engine's exchange between ranks) ----
enhanced_find_cuda_package(CUDNN ENHANCED_CUDNN_ROOT cudnn.h cudnn cudnn libcudnn.so.9)
enhanced_find_cuda_package(NCCL ENHANCED_NCCL_ROOT nccl.h nccl nccl libnccl.so.2)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND NOT TARGET enhanced::nccl)
  add_library(enhanced::nccl UNKNOWN IMPORTED)
  set_target_properties(enhanced::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                                  INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()

# ---- the rpath ----
# CMake puts the folder of a library linked by its full path on the build tree's rpath already;
# this names them explicitly (cuBLAS comes through an imported target, the install rpath has
# none by default) so the binaries find a wheel's libraries at run time without LD_LIBRARY_PATH.
set(ENHANCED_CUDA_LIBRARY_DIRS)
foreach(file "${CUDNN_LIBRARY}" "${NCCL_LIBRARY}" "${CUDA_cublas_LIBRARY}" "${CUDA_CUDART}")
  if(file AND EXISTS "${file}")
    get_filename_component(dir "${file}" DIRECTORY)
    if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
      list(APPEND ENHANCED_CUDA_LIBRARY_DIRS "${dir}")
    endif()
  endif()
endforeach()
list(REMOVE_DUPLICATES ENHANCED_CUDA_LIBRARY_DIRS)
if(ENHANCED_CUDA_RPATH AND ENHANCED_CUDA_LIBRARY_DIRS)
  list(APPEND CMAKE_BUILD_RPATH ${ENHANCED_CUDA_LIBRARY_DIRS})
  list(APPEND CMAKE_INSTALL_RPATH ${ENHANCED_CUDA_LIBRARY_DIRS})
endif()
