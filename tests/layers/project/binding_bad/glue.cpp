// Reaches past low into images.
#include <stoke/images/decode.hpp>

int glue() { return images::decode(); }
