// The host backend's build of the collectives' launches: the units that nvcc compiles apart (their
// .cu twins) in one translation unit, as g++ compiles them in well under a minute and would repeat
// the communicator's common code in each unit.
#include "engine_allreduce_f16_i32_i64_f64.cpp"
#include "engine_allreduce_f32_bf16.cpp"
#include "engine_allreduce_i8_u8_bool.cpp"
#include "engine_copy.cpp"
#include "engine_reduce_f16_f64_i8_u8_bool.cpp"
#include "engine_reduce_f32_bf16_i32_i64.cpp"
