// Umbrella header for stoke::graph.
#pragma once

#include "stoke/graph/autotune.hpp"
#include "stoke/graph/concepts.hpp"
#include "stoke/graph/decision.hpp"
#include "stoke/graph/emitter.hpp"
#include "stoke/graph/errors.hpp"
#include "stoke/graph/options.hpp"
#include "stoke/graph/pipeline.hpp"
#include "stoke/graph/signal.hpp"
#include "stoke/graph/sources.hpp"
#include "stoke/graph/stats.hpp"
#include "stoke/graph/wake.hpp"
