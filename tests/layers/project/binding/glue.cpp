// Speaks low's API only.
#include "stoke/low/low.hpp"

int glue() { return low::value(); }
