/// Typed shared-memory allocation: carve tensors out of the dynamic shared-memory buffer.
///
/// Each allocation is aligned (16 bytes by default, enough for cp.async and ldmatrix) and sized
/// by the tensor type's storage_size() (in elements of its data_type). smem_bytes<Ts...>() gives
/// the same layout's total size as a constant, so the kernel's shared-memory size is an expression
/// of types, never a literal.
///
/// Example:
///     extern __shared__ __align__(16) unsigned char smem[];
///     spio::SmemAllocator alloc(smem);
///     auto a = alloc.allocate<SmemA>();          // SmemA(ptr), ptr 16-byte aligned
///     auto b = alloc.allocate<SmemB>();
///     constexpr unsigned bytes = spio::smem_bytes<SmemA, SmemB>();   // the launch's smem size
#pragma once

#include "spio/device.h"

#if SPIO_GPU_BLOCKS
namespace spio {

/// Default alignment of shared-memory allocations: one 16-byte vector (cp.async, ldmatrix).
inline constexpr unsigned smem_alignment = 16;

namespace detail {
SPIO_HOST_DEVICE constexpr unsigned align_up(unsigned n, unsigned a) { return (n + a - 1) / a * a; }
}  // namespace detail

/// A type with a static storage_size() (elements) and a data_type, constructible from a pointer.
template <typename T>
concept SmemTensor = requires(typename T::data_type* p) {
    T::storage_size();
    T(p);
};

/// Bytes of one tensor type's storage.
template <SmemTensor T>
SPIO_HOST_DEVICE constexpr unsigned storage_bytes() {
    return static_cast<unsigned>(T::storage_size()) *
           static_cast<unsigned>(sizeof(typename T::data_type));
}

/// Bytes that allocating Ts... in order from an aligned base takes (each 16-byte aligned).
template <SmemTensor... Ts>
SPIO_HOST_DEVICE constexpr unsigned smem_bytes() {
    unsigned total = 0;
    ((total = detail::align_up(total, smem_alignment) + storage_bytes<Ts>()), ...);
    return total;
}

/// Bump allocator over a shared-memory buffer.
class SmemAllocator {
   public:
    /// Parameters:
    ///   base   the start of the buffer (e.g. extern __shared__ __align__(16) unsigned char[])
    SPIO_DEVICE explicit SmemAllocator(void* base) : base_(static_cast<unsigned char*>(base)) {}

    /// Allocates storage for a tensor type and returns the tensor over it.
    template <SmemTensor T>
    SPIO_DEVICE T allocate() {
        void* p = take(storage_bytes<T>(), smem_alignment);
        return T(reinterpret_cast<typename T::data_type*>(p));
    }

    /// Allocates n elements of E, aligned to Align bytes (a power of two >= alignof(E)).
    template <typename E, unsigned Align = smem_alignment>
    SPIO_DEVICE E* allocate_array(unsigned n) {
        static_assert((Align & (Align - 1)) == 0 && Align >= alignof(E),
                      "spio::SmemAllocator::allocate_array<E, Align>: Align must be a power of two "
                      ">= alignof(E); use the default (16)");
        return reinterpret_cast<E*>(take(n * static_cast<unsigned>(sizeof(E)), Align));
    }

    /// Bytes allocated so far, including alignment padding.
    SPIO_DEVICE unsigned bytes() const { return offset_; }

   private:
    SPIO_DEVICE unsigned char* take(unsigned bytes, unsigned align) {
        offset_ = detail::align_up(offset_, align);
        unsigned char* p = base_ + offset_;
        offset_ += bytes;
        return p;
    }

    unsigned char* base_;
    unsigned offset_ = 0;
};

}  // namespace spio
#endif  // SPIO_GPU_BLOCKS
