/// Function-attribute macros shared by every spio header.
///
/// SPIO_HOST_DEVICE marks functions usable from host and device code, SPIO_DEVICE device-only
/// functions, SPIO_HOST host-only functions. Under a host compiler (g++, clang) they are plain
/// `inline`, so the typed-dimension headers compile as ordinary C++20 without any CUDA header.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define SPIO_HOST_DEVICE __host__ __device__ __forceinline__
#define SPIO_DEVICE __device__ __forceinline__
#define SPIO_HOST __host__ inline
#else
#define SPIO_HOST_DEVICE inline
#define SPIO_DEVICE inline
#define SPIO_HOST inline
#endif
