#include "draplugin/slice_publisher.h"
// Implementation in progress (the publisher helper fills this in).
