// rcclx/rcclx.hpp: umbrella header: everything public in rcclx.
//
//   #include <rcclx/rcclx.hpp>
#pragma once

#include "config.hpp"
#include "core/barrier.hpp"
#include "core/error.hpp"
#include "core/ops.hpp"
#include "core/peer_table.hpp"
#include "core/signal_pad.hpp"
#include "core/types.hpp"
#include "dda/allreduce.hpp"
#include "dda/flat.hpp"
#include "dda/partition.hpp"
#include "dda/select.hpp"
#include "dda/tree.hpp"
#include "gpu/arch.hpp"
#include "gpu/atomic.hpp"
#include "gpu/clock.hpp"
#include "gpu/group.hpp"
#include "gpu/memory.hpp"
#include "gpu/reduce.hpp"
#include "gpu/runtime.hpp"
