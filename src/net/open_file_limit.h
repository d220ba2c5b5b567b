// The HTTP server's connection slots and waiting room need a descriptor each: the open-file soft
// limit is raised towards the hard one when it is short (as Go's runtime does for every Go
// server), and the waiting room shrinks, with a warning, to what is left after the slots and a
// reserve for everything else. Otherwise accept() would fail for want of descriptors before the
// room is full.
#ifndef TOPOSCHED_NET_OPEN_FILE_LIMIT_H_
#define TOPOSCHED_NET_OPEN_FILE_LIMIT_H_

#include "net/http_server.h"

namespace toposched::net {

// `options` with max_connections and max_waiting_connections at least 1, and the waiting room
// no larger than the open-file limit (raised if it can be) leaves room for.
HttpServerOptions FitOpenFileLimit(HttpServerOptions options);

}  // namespace toposched::net

#endif  // TOPOSCHED_NET_OPEN_FILE_LIMIT_H_
