// STOKE_NN_HOST_DEVICE marks a function that both backends call per element: __host__ __device__
// in a .cu file, nothing in a .cpp file (dropout_mask.hpp, adamw_update.hpp).
#pragma once

#if defined(__CUDACC__)
#define STOKE_NN_HOST_DEVICE __host__ __device__
#else
#define STOKE_NN_HOST_DEVICE
#endif
