// trdata's GPU resample: Pillow's separable antialiased resample (src/augment/resample.rs `run`) on the GPU,
// with flip, normalize, cast and layout folded into the second pass, for a whole batch per launch (grid.z =
// sample). Compiled at run time by NVRTC to a CUBIN for the device (src/cuda/nvrtc.rs); loaded and launched by
// src/cuda/resample_gpu.rs, whose `Desc` mirrors the struct below byte for byte.
//
// Exactness: the host computes every tap (start + 22-bit fixed-point weight, flip applied, the same count for
// every output of an axis, padding outputs all-zero) with the CPU path's own code; the kernels only do the
// integer multiply-adds of Pillow's `ImagingResampleHorizontal_8bpc`/`Vertical_8bpc`: accumulator = 2^21 +
// sum(pixel * weight) in a 32-bit signed int, then `clip8` (>> 22, clamped to 0..255) to the 8-bit intermediate
// and to the final value. With non-negative weights (triangle, nearest) the CPU's unsigned SWAR kernels give
// the same numbers (their accumulator stays below 2^31), so one formula matches every CPU kernel. The final
// 8-bit value indexes a per-channel 256-entry table whose entries are the output element's bytes (u8, f16/bf16
// bits or f32 bits, the CPU OutputLut's values), so dtype handling is a copy.
//
// No #include: NVRTC's bundled headers are not needed (fixed-width types are spelled out). The file also
// compiles as host C++ (the Rust tests run it through an emulation of the launch grid to check the index math
// without a GPU), so it uses only what both dialects accept.

#define TRDATA_PRECISION_BITS 22
#define TRDATA_HALF (1 << (TRDATA_PRECISION_BITS - 1))

// One sample's geometry (112 bytes; resample_gpu.rs `Desc`).
struct Desc {
    unsigned long long src;        // device address of the decoded window's first byte (interleaved RGB u8)
    unsigned long long src_pitch;  // bytes per row of `src`
    unsigned long long dst;        // device address of the sample's output row in the batch slot
    unsigned long long inter;      // byte offset of the sample's 8-bit intermediate in the intermediate buffer
    unsigned int src_x0, src_y0;   // image pixel of `src`'s first pixel (taps are in image pixels)
    unsigned int src_w, src_h;     // decoded window size (pixels); checked on the host, kept for debugging
    unsigned int x_start, x_k;     // element offsets into `taps`: out_w starts, then out_w * x_taps weights
    unsigned int y_start, y_k;     // likewise for rows: out_h starts, out_h * y_taps weights
    unsigned int x_taps, y_taps;   // taps per output column / row
    unsigned int x_win0, x_win1;   // union of the column taps [x_win0, x_win1), image pixels
    unsigned int y_win0, y_win1;   // union of the row taps
    unsigned int vertical_first;   // 1: pass 1 is vertical (rows), pass 2 horizontal; 0: the other way
    unsigned int inter_w, inter_h; // pass 1's output in pixels (3 bytes each, rows inter_w * 3 bytes apart)
    unsigned int own_w, own_h;     // the sample's own output size (taps per axis), at most (out_w, out_h): a
                                   // smaller sample sits at the top left of the output, zero bytes elsewhere
    unsigned int pad;
};

static_assert(sizeof(struct Desc) == 112, "Desc must match src/cuda/resample_gpu.rs");

__device__ __forceinline__ unsigned int trdata_clip8(int acc) {
    // Pillow's clip8: acc >> 22 clamped to 0..255 (an arithmetic shift of a negative value is < 0 -> 0).
    if (acc < 0) return 0u;
    int v = acc >> TRDATA_PRECISION_BITS;
    return v > 255 ? 255u : (unsigned int)v;
}

// Pass 1, for every sample (blockIdx.z) and every pixel of its intermediate:
//  horizontal first: inter[r][o] = H(src row y_win0 + r, column taps of output o),  r < y_win1 - y_win0;
//  vertical first:   inter[i][c] = V(src column x_win0 + c, row taps of output i),  c < x_win1 - x_win0.
extern "C" __global__ void trdata_resample_pass1(const struct Desc* __restrict__ descs,
                                                 const int* __restrict__ taps,
                                                 unsigned char* __restrict__ inter) {
    const struct Desc d = descs[blockIdx.z];
    const unsigned int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= d.inter_w) return;
    const unsigned char* src = (const unsigned char*)d.src;
    unsigned char* out = inter + d.inter;
    const unsigned long long line = 3ull * d.inter_w;
    for (unsigned int row = blockIdx.y * blockDim.y + threadIdx.y; row < d.inter_h; row += gridDim.y * blockDim.y) {
        int a0 = TRDATA_HALF, a1 = TRDATA_HALF, a2 = TRDATA_HALF;
        if (d.vertical_first) {
            const unsigned int s = (unsigned int)taps[d.y_start + row] - d.src_y0;
            const int* k = taps + d.y_k + (unsigned long long)row * d.y_taps;
            const unsigned char* p = src + (unsigned long long)s * d.src_pitch + 3ull * (d.x_win0 + col - d.src_x0);
            for (unsigned int t = 0; t < d.y_taps; ++t) {
                const int w = k[t];
                a0 += (int)p[0] * w;
                a1 += (int)p[1] * w;
                a2 += (int)p[2] * w;
                p += d.src_pitch;
            }
        } else {
            const unsigned int s = (unsigned int)taps[d.x_start + col] - d.src_x0;
            const int* k = taps + d.x_k + (unsigned long long)col * d.x_taps;
            const unsigned char* p =
                src + (unsigned long long)(d.y_win0 + row - d.src_y0) * d.src_pitch + 3ull * s;
            for (unsigned int t = 0; t < d.x_taps; ++t) {
                const int w = k[t];
                a0 += (int)p[0] * w;
                a1 += (int)p[1] * w;
                a2 += (int)p[2] * w;
                p += 3;
            }
        }
        unsigned char* o = out + row * line + 3ull * col;
        o[0] = (unsigned char)trdata_clip8(a0);
        o[1] = (unsigned char)trdata_clip8(a1);
        o[2] = (unsigned char)trdata_clip8(a2);
    }
}

// Copy output element `v` of channel `c` (its bytes in the table) to `dst + off` (elem_bytes-aligned: the host
// checks each sample's `dst`, and every offset is a multiple of elem_bytes).
__device__ __forceinline__ void trdata_store(unsigned char* dst, unsigned long long off, const unsigned char* lut,
                                             unsigned int elem_bytes, unsigned int c, unsigned int v) {
    const unsigned int e = c * 256u + v;
    if (elem_bytes == 4) {
        *(unsigned int*)(dst + off) = ((const unsigned int*)lut)[e];
    } else if (elem_bytes == 2) {
        *(unsigned short*)(dst + off) = ((const unsigned short*)lut)[e];
    } else {
        dst[off] = lut[e];
    }
}

// Pass 2, for every sample (blockIdx.z) and every output pixel (row i, column o), the other axis:
//  horizontal first: V over inter rows taps[y_start + i] - y_win0 .. + y_taps, column o;
//  vertical first:   H over inter row i, columns taps[x_start + o] - x_win0 .. + x_taps;
// then each channel through the table into the sample's output in NCHW (planes of out_h * out_w) or NHWC.
// Outside the sample's own size (o >= own_w or i >= own_h: `pad_to`'s canvas) every element is zero bytes, as the
// CPU writer leaves it.
extern "C" __global__ void trdata_resample_pass2(const struct Desc* __restrict__ descs,
                                                 const int* __restrict__ taps,
                                                 const unsigned char* __restrict__ inter,
                                                 const unsigned char* __restrict__ lut,
                                                 unsigned int elem_bytes, unsigned int nchw,
                                                 unsigned int out_w, unsigned int out_h) {
    const struct Desc d = descs[blockIdx.z];
    const unsigned int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= out_w) return;
    const unsigned char* in = inter + d.inter;
    unsigned char* dst = (unsigned char*)d.dst;
    const unsigned long long line = 3ull * d.inter_w;
    const unsigned long long plane = (unsigned long long)out_h * out_w;
    for (unsigned int i = blockIdx.y * blockDim.y + threadIdx.y; i < out_h; i += gridDim.y * blockDim.y) {
        const unsigned long long px = (unsigned long long)i * out_w + o;
        if (o >= d.own_w || i >= d.own_h) {
            for (unsigned int c = 0; c < 3; ++c) {
                const unsigned long long idx = nchw ? c * plane + px : 3ull * px + c;
                for (unsigned int b = 0; b < elem_bytes; ++b) dst[idx * elem_bytes + b] = 0;
            }
            continue;
        }
        int a0 = TRDATA_HALF, a1 = TRDATA_HALF, a2 = TRDATA_HALF;
        if (d.vertical_first) {
            const unsigned int s = (unsigned int)taps[d.x_start + o] - d.x_win0;
            const int* k = taps + d.x_k + (unsigned long long)o * d.x_taps;
            const unsigned char* p = in + i * line + 3ull * s;
            for (unsigned int t = 0; t < d.x_taps; ++t) {
                const int w = k[t];
                a0 += (int)p[0] * w;
                a1 += (int)p[1] * w;
                a2 += (int)p[2] * w;
                p += 3;
            }
        } else {
            const unsigned int s = (unsigned int)taps[d.y_start + i] - d.y_win0;
            const int* k = taps + d.y_k + (unsigned long long)i * d.y_taps;
            const unsigned char* p = in + (unsigned long long)s * line + 3ull * o;
            for (unsigned int t = 0; t < d.y_taps; ++t) {
                const int w = k[t];
                a0 += (int)p[0] * w;
                a1 += (int)p[1] * w;
                a2 += (int)p[2] * w;
                p += line;
            }
        }
        const unsigned int v[3] = {trdata_clip8(a0), trdata_clip8(a1), trdata_clip8(a2)};
        for (unsigned int c = 0; c < 3; ++c) {
            const unsigned long long idx = nchw ? c * plane + px : 3ull * px + c;
            trdata_store(dst, idx * elem_bytes, lut, elem_bytes, c, v[c]);
        }
    }
}
